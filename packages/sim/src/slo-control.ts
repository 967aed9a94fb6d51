/**
 * The SLO-class control contract lives in the shared scheduler, so the live dispatcher and the
 * simulator drive one implementation; the simulator's runner is one of its hosts.
 */
export type {
  ControlOp,
  ControlReplica,
  RunningRequest,
  SloControl,
  SloControlContext,
} from '@fairway/scheduler';
