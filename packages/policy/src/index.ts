export type { LiftMode, OrderingMode, OrderingPolicy } from './ordering.ts';
