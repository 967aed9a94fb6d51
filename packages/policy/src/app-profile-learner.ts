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
}

const learnerSchema = z.object({
  minSamples: z.number().int().positive().optional(),
  window: z.number().int().positive().optional(),
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

  constructor(options: AppProfileLearnerOptions = {}) {
    parseInput('AppProfileLearner', learnerSchema, options);
    this.#minSamples = options.minSamples ?? 20;
    this.#window = options.window ?? 1000;
  }

  /** Adds a settled call: its prompt split into system and other input, and its true output. */
  observe(req: RequestDescriptor, usage: Usage): void {
    const app = appOf(req);
    const stage = req.interactionStage ?? 0;
    let stages = this.#apps.get(app);
    if (stages === undefined) {
      stages = [];
      this.#apps.set(app, stages);
    }
    while (stages.length <= stage) stages.push({ n: 0, input: 0, system: 0, output: 0 });
    const s = stages[stage] as StageMean;
    const sys = Math.min(req.systemTokens ?? 0, usage.inputTokens);
    s.n++;
    const k = 1 / Math.min(s.n, this.#window);
    s.input += (usage.inputTokens - sys - s.input) * k;
    s.system += (sys - s.system) * k;
    s.output += (usage.outputTokens - s.output) * k;
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
