/**
 * FairServe's setting (Khan et al., "FairServe: Fair LLM serving across diverse applications",
 * sections 3 and 5) as a fairway scenario: users of three apps with different token profiles,
 * multi-call interactions drawn from FairServe Table 2 (73% single call, 26% 2–10 calls, the rest
 * larger), and one abusive user who floods the platform for a while. The MS Copilot trace the paper
 * measures is not public, so the apps are synthetic, scaled to VTC's A10G engine (10,000 KV tokens):
 *
 * - `qa`: question answering — short prompts behind a system prompt, short answers;
 * - `summarize`: long documents in, short summaries out, one call each;
 * - `code`: coding agent — moderate prompts, long outputs, multi-call interactions.
 *
 * Each benign user is its own tenant (so VTC and RPM see the same units FairServe's WSC and OIT
 * see: users). Together the benign users load the engine to about two thirds of its capacity; the
 * abuser, a `qa` user sending 2 requests/s between 90 s and 270 s, pushes it far past capacity.
 */
import type { ScenarioInput } from '../scenario-schema.ts';

const A10G = {
  engines: [
    {
      gpu: 'A10G-24GB',
      model: 'llama-2-7b',
      tp: 1,
      count: 1,
      kvCapacityTokens: 10_000,
      options: { blockSize: 1 },
    },
  ],
};

/** When the abusive user floods the platform, seconds from the start. */
export const FAIRSERVE_ABUSE_WINDOW_S = { startS: 90, endS: 270 } as const;

/** The id of the abusive user (and tenant) in `fairserve-abuse`. */
export const FAIRSERVE_ABUSER = 'abuser';

interface AppSpec {
  readonly app: string;
  readonly users: number;
  /** Interactions per second per user. */
  readonly rate: number;
  readonly input: { readonly median: number; readonly p90: number; readonly max: number };
  readonly systemTokens: number;
  readonly output: { readonly median: number; readonly p90: number; readonly max: number };
  readonly multiCall: boolean;
}

const APPS: readonly AppSpec[] = [
  {
    app: 'qa',
    users: 10,
    rate: 1 / 40,
    input: { median: 220, p90: 420, max: 1000 },
    systemTokens: 120,
    output: { median: 120, p90: 260, max: 400 },
    multiCall: true,
  },
  {
    app: 'summarize',
    users: 6,
    rate: 1 / 60,
    input: { median: 1400, p90: 2200, max: 3000 },
    systemTokens: 80,
    output: { median: 90, p90: 160, max: 256 },
    multiCall: false,
  },
  {
    app: 'code',
    users: 8,
    rate: 1 / 90,
    input: { median: 350, p90: 600, max: 1200 },
    systemTokens: 200,
    output: { median: 300, p90: 500, max: 700 },
    multiCall: true,
  },
];

/**
 * The benign users' streams. Open loop: each next call of an interaction is sent when the previous
 * one is expected to have finished (plus 1 s of think time); closed loop: when it has finished.
 */
function benignStreams(closedLoop: boolean): NonNullable<ScenarioInput['streams']> {
  return APPS.flatMap((a) =>
    Array.from({ length: a.users }, (_, i) => ({
      tenant: `${a.app}-${i + 1}`,
      app: a.app,
      arrival: { process: 'poisson' as const, rate: a.rate },
      input: { kind: 'lognormal' as const, median: a.input.median, p90: a.input.p90, max: a.input.max },
      output: { kind: 'lognormal' as const, median: a.output.median, p90: a.output.p90, max: a.output.max },
      maxTokens: a.output.max,
      systemTokens: a.systemTokens,
      ...(a.multiCall
        ? {
            interaction: {
              size: 'fairserve' as const,
              ...(closedLoop
                ? {
                    followUp: {
                      mode: 'after-completion' as const,
                      thinkS: { kind: 'fixed' as const, value: 1 },
                    },
                  }
                : {}),
            },
          }
        : {}),
    })),
  );
}

/** `fairserve-abuse`, its interactions open or closed loop. */
function abuse(closedLoop: boolean): ScenarioInput {
  return {
    description:
      'FairServe section 5: 24 users of qa / summarize / code apps (73% single-call interactions, 26% 2-10 calls) ' +
      'at ~2/3 of capacity, plus one abusive qa user at 2 req/s between 90 s and 270 s',
    durationS: 360,
    seed: 7,
    cluster: A10G,
    tenants: [
      ...APPS.flatMap((a) =>
        Array.from({ length: a.users }, (_, i) => ({ id: `${a.app}-${i + 1}`, weight: 1, app: a.app })),
      ),
      { id: FAIRSERVE_ABUSER, weight: 1, app: 'qa' },
    ],
    streams: [
      ...benignStreams(closedLoop),
      {
        tenant: FAIRSERVE_ABUSER,
        app: 'qa',
        arrival: { process: 'poisson', rate: 2 },
        input: { kind: 'lognormal', median: 220, p90: 420, max: 1000 },
        output: { kind: 'lognormal', median: 120, p90: 260, max: 400 },
        maxTokens: 400,
        systemTokens: 120,
        startS: FAIRSERVE_ABUSE_WINDOW_S.startS,
        endS: FAIRSERVE_ABUSE_WINDOW_S.endS,
      },
    ],
  };
}

/** Built-in FairServe scenarios by name. */
export const FAIRSERVE_SCENARIOS: Readonly<Record<string, ScenarioInput>> = {
  'fairserve-abuse': abuse(false),
  'fairserve-abuse-closed': {
    ...abuse(true),
    description:
      'fairserve-abuse with closed-loop interactions: each next call of an interaction is sent 1 s after ' +
      'the previous call finished, as an agent or a user waits for the answer',
  },
};
