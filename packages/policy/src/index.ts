export { fcfsPolicy } from './fcfs.ts';
export type { LiftMode, OrderingMode, OrderingPolicy } from './ordering.ts';
