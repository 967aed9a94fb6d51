import { type AppProfile, cachedPromptTokens, type RequestDescriptor, type Usage } from '@fairway/core';
import { z } from 'zod';
import type { AppProfileLearner } from './app-profile-learner.ts';
import { CachedShareHistory } from './cached-share.ts';
import { PolicyInputError, parseInput } from './errors.ts';
import { appOf, userOf } from './oit.ts';
import type { OrderingPolicy } from './ordering.ts';
import { cachedWeightOf } from './vtc.ts';

/** Options of {@link wscPolicy}. */
export interface WscOptions {
  /** Expected token profile of an app, per interaction stage (historical averages). */
  readonly appProfile: (app: string) => AppProfile | undefined;
  /** Profile for apps `appProfile` does not know; without one, such requests are rejected. */
  readonly fallbackProfile?: AppProfile;
  /**
   * Profiles learned from the traffic itself ({@link AppProfileLearner}): every settled call feeds
   * it, and once an app has enough samples its learned profile replaces `appProfile`'s (which then
   * only covers the start and apps too rare to learn). @default none (configured profiles only)
   */
  readonly learner?: AppProfileLearner | undefined;
  /**
   * Whose service a counter measures: `user` (FairServe's `u_i`, one counter per user across
   * apps) or `user-app` (one per user of each app). @default 'user'
   */
  readonly counter?: 'user' | 'user-app';
  /**
   * User priority factor E: service counts E times, so a user with E < 1 is preferred.
   * @default () => 1
   */
  readonly userPriority?: (user: string) => number;
  /** Weight of (non-system) input tokens. @default 1 */
  readonly alpha?: number;
  /** Weight of system-prompt tokens. @default 2 */
  readonly beta?: number;
  /** Weight of output tokens. @default 1 */
  readonly gamma?: number;
  /**
   * When a request's service reaches its counter: `streaming` charges the prompt at dispatch and
   * the output as it streams (as VTC), `completion` charges it all when the request finishes (as
   * FairServe's Algorithm 1 writes it). @default 'streaming'
   */
  readonly chargeAt?: 'streaming' | 'completion';
  /**
   * Weight of a prompt token the engine served from its prefix cache, relative to one it
   * prefilled (0–1), or a weight per request; applied to the system prompt first (the prefix a
   * cache holds), then to the rest. @default DEFAULT_CACHED_TOKEN_WEIGHT (0.1)
   */
  readonly cachedTokenWeight?: number | ((req: RequestDescriptor) => number);
  /**
   * Whether the dispatch charge predicts the prompt's cached tokens from the flow's recent share
   * (as VTC's `predictCached`). @default true
   */
  readonly predictCached?: boolean;
}

const wscSchema = z.object({
  alpha: z.number().min(0).optional(),
  beta: z.number().min(0).optional(),
  gamma: z.number().min(0).optional(),
});

/**
 * The WSC flow of a request: its user (FairServe's per-user counter `u_i`), or `user@app` when
 * counters are kept per user of each app.
 */
export function wscFlowOf(req: RequestDescriptor, counter: 'user' | 'user-app' = 'user'): string {
  return counter === 'user' ? userOf(req) : `${userOf(req)}@${appOf(req)}`;
}

/** Whether a request continues an interaction (a call after the first), served first under WSC. */
export function continuesInteraction(req: RequestDescriptor): boolean {
  return req.interactionId !== undefined && (req.interactionStage ?? 0) > 0;
}

/**
 * FairServe's Weighted Service Counter (FairServe section 4.3, Eq. 2–3): a request's service is
 * `E_user · (α·n_in + β·n_sys + γ·n_out) / w_{a,j}` with `w_{a,j} = α·N̄_in + β·N̄_sys + γ·N̄_out`,
 * the app's expected tokens at the request's interaction stage, so users of token-heavy apps are
 * not penalised for their app's normal size. `n_in` excludes system tokens. One counter per user
 * across apps (the paper's `u_i`) unless `counter: 'user-app'`; the expected tokens are learned
 * from the traffic when a `learner` is given. Charged like VTC by default: input and system tokens
 * at dispatch, output as it streams, settled to the total at the end; or all at the end
 * (`chargeAt: 'completion'`, Algorithm 1 as written).
 *
 * Ongoing interactions are served first (Algorithm 1 lines 31–35) by marking calls after the first
 * as the store's `continuation`: they go ahead of the queue's other requests, least counter first,
 * while sharing the flow's counter. A lift on rejoin applies as in VTC (Algorithm 1 lines 12–18).
 */
export function wscPolicy(options: WscOptions): OrderingPolicy {
  parseInput('wscPolicy', wscSchema, { alpha: options.alpha, beta: options.beta, gamma: options.gamma });
  const alpha = options.alpha ?? 1;
  const beta = options.beta ?? 2;
  const gamma = options.gamma ?? 1;
  const norm = (req: RequestDescriptor): number => {
    const app = appOf(req);
    const profile = options.learner?.profile(app) ?? options.appProfile(app) ?? options.fallbackProfile;
    if (profile === undefined || profile.stages.length === 0) {
      throw new PolicyInputError('wscPolicy', [
        { path: `appProfile.${app}`, message: 'no token profile for this app' },
      ]);
    }
    const j = Math.min(req.interactionStage ?? 0, profile.stages.length - 1);
    const s = profile.stages[j] as AppProfile['stages'][number];
    const w = alpha * s.input + beta * s.system + gamma * s.output;
    if (!(w > 0)) {
      throw new PolicyInputError('wscPolicy', [
        { path: `appProfile.${app}.stages[${j}]`, message: 'expected tokens must be positive' },
      ]);
    }
    const e = options.userPriority?.(userOf(req)) ?? 1;
    return e / w;
  };
  const promptCost = (req: RequestDescriptor, usage?: Usage): number => {
    const sys = Math.min(req.systemTokens ?? 0, req.inputTokens);
    const full = alpha * (req.inputTokens - sys) + beta * sys;
    if (usage === undefined) return full;
    // The cache holds a prompt's leading blocks, the system prompt first.
    const cached = Math.min(cachedPromptTokens(usage), req.inputTokens);
    if (cached === 0) return full;
    const discount = 1 - cachedWeightOf(options.cachedTokenWeight, req);
    const cachedSys = Math.min(cached, sys);
    return full - discount * (beta * cachedSys + alpha * (cached - cachedSys));
  };
  const counter = options.counter ?? 'user';
  const learner = options.learner;
  const cachedHistory = (options.predictCached ?? true) ? new CachedShareHistory() : undefined;
  const flowOf = (req: RequestDescriptor): string => wscFlowOf(req, counter);
  /** The prompt's cost at dispatch, its cached tokens (known, or its flow's predicted share) at the weight. */
  const promptAtDispatch = (req: RequestDescriptor): number => {
    const cached = req.cachedPromptTokens ?? cachedHistory?.predict(flowOf(req), req.inputTokens);
    return cached === undefined
      ? promptCost(req)
      : promptCost(req, { inputTokens: req.inputTokens, outputTokens: 0, cachedTokens: cached });
  };
  const settled = (req: RequestDescriptor, usage: Usage): void => {
    learner?.observe(req, usage);
    cachedHistory?.observe(flowOf(req), usage);
  };
  return {
    name: 'wsc',
    mode: 'fair',
    lift: 'vtc',
    flowOf: (req) => wscFlowOf(req, counter),
    score: (req) => req.arrivalMs,
    ...(options.chargeAt === 'completion'
      ? { dispatchCost: () => 0, outputCost: () => 0 }
      : {
          dispatchCost: (req: RequestDescriptor) => promptAtDispatch(req) * norm(req),
          outputCost: (req: RequestDescriptor, before: number, after: number) =>
            after > before ? gamma * (after - before) * norm(req) : 0,
        }),
    finalCost: (req, usage: Usage) => (promptCost(req, usage) + gamma * usage.outputTokens) * norm(req),
    ...(learner || cachedHistory ? { settled } : {}),
    continuation: continuesInteraction,
  };
}
