import {
  type AladdinOptions,
  type PlacedRequest,
  type ReplicaView,
  resolveAladdinOptions,
} from './replica-view.ts';
import { checkPlacement } from './slo-feasibility.ts';

/** A request that finished on a replica, with the length it was predicted and the length it had. */
export interface FinishedRequest {
  readonly id: string;
  readonly predictedOutput: number;
  readonly actualOutput: number;
}

/** A replica whose actual state may have diverged from prediction. */
export interface RebalanceReplica extends ReplicaView {
  /** Requests that finished since the last re-balance (over-estimates reduce the replica's error). */
  readonly finished?: readonly FinishedRequest[] | undefined;
}

/** Aladdin's per-replica prediction error: context tokens `l^e` and batch size `b^e` (section 4.3). */
export interface PredictionError {
  readonly replica: string;
  readonly lengthError: number;
  readonly batchError: number;
  /** Distance of the replica's error line from the origin (Algorithm 2, line 29). */
  readonly distance: number;
}

/** Move a not-yet-started request from one replica to another. */
export interface RebalanceMove {
  readonly requestId: string;
  readonly from: string;
  readonly to: string;
}

/** Proposed moves and the prediction errors before and after them. */
export interface RebalancePlan {
  readonly moves: readonly RebalanceMove[];
  readonly before: readonly PredictionError[];
  readonly after: readonly PredictionError[];
}

/** Options of {@link rebalance}. */
export interface RebalanceOptions extends AladdinOptions {
  /**
   * New total-length prediction for a running request that already outlived its prediction
   * (Aladdin re-predicts with the conditional mean length given the tokens so far).
   * @default the tokens so far plus the original prediction
   */
  readonly repredict?: (req: PlacedRequest) => number;
  /** Most moves to propose in one call. @default 64 */
  readonly maxMoves?: number;
}

function errorDistance(replica: ReplicaView, lengthError: number, batchError: number): number {
  // The error line k2·l + c2·b + c = 0 through the error point, normal (k2, c2) from Eq. 4.
  const { k2, c2 } = replica.perf.decode;
  const norm = Math.hypot(k2, c2);
  return norm === 0 ? 0 : Math.abs(k2 * lengthError + c2 * batchError) / norm;
}

/** Prediction error of each replica from its running and finished requests (Algorithm 2, lines 5–18). */
export function predictionErrors(
  replicas: readonly RebalanceReplica[],
  repredict: (req: PlacedRequest) => number = defaultRepredict,
): PredictionError[] {
  return replicas.map((replica) => {
    let lengthError = 0;
    let batchError = 0;
    for (const r of replica.requests) {
      if (r.started && r.generated > r.predictedOutput) {
        // Under-estimated: it will keep running for about the re-predicted remainder.
        lengthError += Math.max(repredict(r) - r.generated, 0);
        batchError += 1;
      }
    }
    for (const f of replica.finished ?? []) {
      if (f.actualOutput < f.predictedOutput) {
        lengthError += f.actualOutput - f.predictedOutput;
        batchError -= 1;
      }
    }
    return {
      replica: replica.id,
      lengthError,
      batchError,
      distance: errorDistance(replica, lengthError, batchError),
    };
  });
}

function defaultRepredict(req: PlacedRequest): number {
  return req.generated + req.predictedOutput;
}

/**
 * Aladdin's re-balancing with prediction error (section 4.3, Algorithm 2): replicas whose requests
 * ran longer than predicted are over-utilised, those whose requests ended early under-utilised.
 * Requests placed but not yet started are moved, greedily one at a time, to the move that most
 * reduces the summed distance of the replicas' error lines from the origin, as long as the target
 * still meets every SLO. A moved request shifts `l^e` by its context (input + predicted output) —
 * the paper shifts by the predicted output only; the prompt occupies the cache just the same.
 */
export function rebalance(
  replicas: readonly RebalanceReplica[],
  options: RebalanceOptions = {},
): RebalancePlan {
  const opts = resolveAladdinOptions(options);
  const repredict = options.repredict ?? defaultRepredict;
  const maxMoves = options.maxMoves ?? 64;
  const before = predictionErrors(replicas, repredict);

  const state = replicas.map((replica, i) => ({
    view: { ...replica, requests: [...replica.requests] } as ReplicaView & { requests: PlacedRequest[] },
    lengthError: (before[i] as PredictionError).lengthError,
    batchError: (before[i] as PredictionError).batchError,
  }));
  const distance = (i: number, dl: number, db: number) => {
    const s = state[i] as (typeof state)[number];
    return errorDistance(s.view, s.lengthError + dl, s.batchError + db);
  };

  const moves: RebalanceMove[] = [];
  while (moves.length < maxMoves) {
    let best: { gain: number; from: number; to: number; req: PlacedRequest } | undefined;
    for (let x = 0; x < state.length; x++) {
      const sx = state[x] as (typeof state)[number];
      for (const req of sx.view.requests) {
        if (req.started) continue;
        const size = req.inputTokens + req.predictedOutput;
        const fromNow = distance(x, 0, 0);
        const fromAfter = distance(x, -size, -1);
        for (let y = 0; y < state.length; y++) {
          if (y === x) continue;
          const gain = fromNow + distance(y, 0, 0) - fromAfter - distance(y, size, 1);
          if (gain <= 1e-9 || (best && gain <= best.gain)) continue;
          if (!checkPlacement((state[y] as (typeof state)[number]).view, req, opts).ok) continue;
          best = { gain, from: x, to: y, req };
        }
      }
    }
    if (!best) break;
    const sx = state[best.from] as (typeof state)[number];
    const sy = state[best.to] as (typeof state)[number];
    const size = best.req.inputTokens + best.req.predictedOutput;
    sx.view.requests.splice(sx.view.requests.indexOf(best.req), 1);
    sx.lengthError -= size;
    sx.batchError -= 1;
    sy.view.requests.push(best.req);
    sy.lengthError += size;
    sy.batchError += 1;
    moves.push({ requestId: best.req.id, from: sx.view.id, to: sy.view.id });
  }
  const after = state.map((s) => ({
    replica: s.view.id,
    lengthError: s.lengthError,
    batchError: s.batchError,
    distance: errorDistance(s.view, s.lengthError, s.batchError),
  }));
  return { moves, before, after };
}
