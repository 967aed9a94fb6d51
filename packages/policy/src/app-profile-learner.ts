import type { AppProfile, RequestDescriptor, Usage } from '@fairway/core';
import { z } from 'zod';
import { parseInput } from './errors.ts';
import { appOf } from './oit.ts';

/** Options of {@link AppProfileLearner}. */
export interface AppProfileLearnerOptions {
  /** Settled calls a stage needs before its learned means are used. @default 20 */
  readonly minSamples?: number;
  /**
   * Memory of the running means, in calls: the first `window` calls are averaged equally, later
   * ones move the mean by 1/window each (an exponential average), so a shift in an app's usage is
   * followed. @default 1000
   */
  readonly window?: number;
  /**
   * Keep the calls this learner observes, up to this many, for {@link AppProfileLearner.drain}:
   * what a dispatcher shares with the others so every one learns from every call. @default 0
   */
  readonly keep?: number;
  /**
   * The apps learned; calls of any other app are ignored, so names a client makes up cost no
   * memory and learn no profile. @default every app
   */
  readonly apps?: ReadonlySet<string> | undefined;
}

/** One settled call as app profiles learn it. */
export interface AppSample {
  readonly app: string;
  readonly stage: number;
  /** Prompt tokens besides the system prompt. */
  readonly input: number;
  readonly system: number;
  readonly output: number;
}

/** Stages learned per app at most: a longer interaction's later calls count as this last stage. */
export const MAX_LEARNED_STAGES = 64;

const learnerSchema = z.object({
  minSamples: z.number().int().positive().optional(),
  window: z.number().int().positive().optional(),
  keep: z.number().int().nonnegative().optional(),
  apps: z.instanceof(Set).optional(),
});

interface StageMean {
  n: number;
  input: number;
  system: number;
  output: number;
}

/**
 * App profiles learned from traffic (FairServe section 4.3: WSC's expected input, system and
 * output tokens of an app at each interaction stage, `N̄^{aj}`, "based on analysis of historical
 * data"): running means per (app, stage), fed with every settled call. An app's profile covers the
 * stages with enough samples, up to the first that has too few — so its length is the app's usual
 * number of calls per interaction as far as the traffic shows it. Pure state, per gateway.
 */
export class AppProfileLearner {
  readonly #minSamples: number;
  readonly #window: number;
  readonly #apps = new Map<string, StageMean[]>();
  readonly #keep: number;
  readonly #known: ReadonlySet<string> | undefined;
  #kept: AppSample[] = [];
  /** Observed calls not kept because `keep` were waiting to be drained. */
  dropped = 0;

  constructor(options: AppProfileLearnerOptions = {}) {
    parseInput('AppProfileLearner', learnerSchema, options);
    this.#minSamples = options.minSamples ?? 20;
    this.#window = options.window ?? 1000;
    this.#keep = options.keep ?? 0;
    this.#known = options.apps;
  }

  /** Adds a settled call: its prompt split into system and other input, and its true output. */
  observe(req: RequestDescriptor, usage: Usage): void {
    const app = appOf(req);
    if (this.#known !== undefined && !this.#known.has(app)) return;
    const sys = Math.min(req.systemTokens ?? 0, usage.inputTokens);
    const sample = {
      app,
      stage: Math.min(req.interactionStage ?? 0, MAX_LEARNED_STAGES - 1),
      input: usage.inputTokens - sys,
      system: sys,
      output: usage.outputTokens,
    };
    this.#learn(sample);
    if (this.#keep === 0) return;
    if (this.#kept.length < this.#keep) this.#kept.push(sample);
    else this.dropped++;
  }

  /** Adds calls another learner observed (never kept for draining again). */
  merge(samples: readonly AppSample[]): void {
    for (const s of samples)
      if (this.#known === undefined || this.#known.has(s.app))
        this.#learn({ ...s, stage: Math.min(s.stage, MAX_LEARNED_STAGES - 1) });
  }

  /** The calls observed since the last drain (with `keep`), oldest first. */
  drain(): AppSample[] {
    const out = this.#kept;
    this.#kept = [];
    return out;
  }

  #learn(sample: AppSample): void {
    let stages = this.#apps.get(sample.app);
    if (stages === undefined) {
      stages = [];
      this.#apps.set(sample.app, stages);
    }
    while (stages.length <= sample.stage) stages.push({ n: 0, input: 0, system: 0, output: 0 });
    const s = stages[sample.stage] as StageMean;
    s.n++;
    const k = 1 / Math.min(s.n, this.#window);
    s.input += (sample.input - s.input) * k;
    s.system += (sample.system - s.system) * k;
    s.output += (sample.output - s.output) * k;
  }

  /** The learned profile of an app, or undefined until its first stage has enough samples. */
  profile(app: string): AppProfile | undefined {
    const stages: AppProfile['stages'][number][] = [];
    for (const s of this.#apps.get(app) ?? []) {
      if (s.n < this.#minSamples) break;
      stages.push({ input: s.input, system: s.system, output: s.output });
    }
    return stages.length === 0 ? undefined : { id: app, stages };
  }

  /** Learned output/input token ratio of an app's first stage (for reports), if learned. */
  outputInputRatio(app: string): number | undefined {
    const s = this.profile(app)?.stages[0];
    return s === undefined || s.input + s.system <= 0 ? undefined : s.output / (s.input + s.system);
  }
}
