/**
 * The VTC paper's synthetic suites (Sheng et al., "Fairness in Serving Large Language Models",
 * OSDI 2024, sections 5.1–5.4 and appendix B) as fairway scenarios: Llama-2-7B on one A10G (24 GB)
 * with a 10,000-token KV pool, 256-token prompts and outputs unless a figure says otherwise.
 *
 * Rates, lengths and durations follow the figure captions; where a caption is silent, the
 * authors' artifact (Ying1123/VTC-artifact, `fair_bench/exp_suite.py` and `trace.py`) fills in:
 * the random phase of uniform arrivals, the ramp's starting rate (0.2 req/s), the on/off period
 * (60 s, client 1 only, starting ON) and the phase boundaries of the distribution shift. The
 * metrics of Tables 2–6 are computed over a 600 s run (`T = 600` in the artifact's plot scripts),
 * which is the duration used here for the 10-minute suites.
 */
import type { ScenarioInput } from '../scenario-schema.ts';

/**
 * S-LoRA, which VTC runs on, pages KV memory with a block size of 1 (VTC section 5.1, footnote 7).
 * The paper measured on a real A10G, so its suites run with real step-time jitter: lognormal with
 * vLLM's measured decode-step CV (`VLLM_STEP_JITTER_CV`, 0.10), drawn from the run's seed
 * (`fairway sim --step-noise none` turns it off).
 */
export const A10G_VTC = {
  engines: [
    {
      gpu: 'A10G-24GB',
      model: 'llama-2-7b',
      tp: 1,
      count: 1,
      kvCapacityTokens: 10_000,
      options: { blockSize: 1, stepNoise: { distribution: 'lognormal' as const } },
    },
  ],
};

/**
 * The ablation of VTC section 5.4 (Figure 15) runs Llama-2-13B on one A100 (80 GB) with S-LoRA and a
 * KV pool of `kvCapacityTokens` (35,000 or 65,000 tokens in the paper), block size 1.
 */
function a100Vtc13b(kvCapacityTokens: number) {
  return {
    engines: [
      {
        gpu: 'A100-80GB',
        model: 'llama-2-13b',
        tp: 1,
        count: 1,
        kvCapacityTokens,
        options: { blockSize: 1, stepNoise: { distribution: 'lognormal' as const } },
      },
    ],
  };
}

/**
 * A Figure 15 setting: two backlogged clients sending `len`-token prompts and outputs evenly spaced
 * at `rates` req/s for 600 s (the artifact's `overload-s4-*` suites in `fair_bench/exp_suite.py`).
 */
function ablation(kv: number, len: number, rates: readonly [number, number]): ScenarioInput {
  return {
    description: `VTC Figure 15: two backlogged clients at ${rates[0] * 60} and ${rates[1] * 60} req/min (uniform), ${len}/${len} tokens, Llama-2-13B on A100-80GB with a ${kv}-token KV pool`,
    durationS: 600,
    seed: 42,
    cluster: a100Vtc13b(kv),
    tenants: tenants(2),
    streams: [
      { tenant: 'client1', arrival: uniform(rates[0]), input: len, output: len },
      { tenant: 'client2', arrival: uniform(rates[1]), input: len, output: len },
    ],
  };
}

const uniform = (rate: number) => ({ process: 'uniform' as const, rate });
const poisson = (rate: number) => ({ process: 'poisson' as const, rate });

function twoClients(rates: readonly [number, number]) {
  return [
    { tenant: 'client1', arrival: uniform(rates[0]), input: 256, output: 256 },
    { tenant: 'client2', arrival: uniform(rates[1]), input: 256, output: 256 },
  ];
}

const tenants = (n: number) => Array.from({ length: n }, (_, i) => ({ id: `client${i + 1}`, weight: 1 }));

/**
 * Shares of the three most active clients in each 200 s era of `vtc-real` (the rest goes to a
 * Zipf(1) tail of 24 clients). In the LMSYS trace the paper samples, a client is one model of the
 * Chatbot Arena, and which models are popular shifts over the months the trace spans; sampled
 * conversations are re-scaled onto 10 minutes, so the shift happens within the run. Read off the
 * artifact's published per-request results (Ying1123/VTC-artifact,
 * `fair_bench/FCFS/all_results_real.jsonl`, about 85 requests each at 0–26 s, 137–164 s and
 * 316–353 s, and the last 30 at 589–600 s): `rank-8-0` sends about half at first, over a quarter
 * at 150 s and one in twenty after 300 s; `rank-8-2` a seventh at first and a quarter to a third
 * later; `rank-8-10` none in the first two samples and a sixth to a fifth from the middle on.
 */
const REAL_ERAS: readonly {
  readonly startS: number;
  readonly endS: number;
  readonly top: readonly number[];
}[] = [
  { startS: 0, endS: 200, top: [0.45, 0.2, 0] },
  { startS: 200, endS: 400, top: [0.1, 0.25, 0.22] },
  { startS: 400, endS: 600, top: [0.05, 0.3, 0.18] },
];

/** Built-in VTC scenarios by name. */
export const VTC_SCENARIOS: Readonly<Record<string, ScenarioInput>> = {
  'vtc-overload': {
    description:
      'VTC Figure 3 / Tables 4-5: two clients at 90 and 180 req/min (uniform), 256/256 tokens, both backlogged',
    durationS: 600,
    seed: 42,
    cluster: A10G_VTC,
    tenants: tenants(2),
    streams: twoClients([1.5, 3]),
  },
  'vtc-proportional': {
    description:
      'VTC Figure 4: three clients at 15, 30 and 90 req/min (uniform), 256/256 tokens; only client 3 is backlogged',
    durationS: 600,
    seed: 42,
    cluster: A10G_VTC,
    tenants: tenants(3),
    streams: [
      { tenant: 'client1', arrival: uniform(0.25), input: 256, output: 256 },
      { tenant: 'client2', arrival: uniform(0.5), input: 256, output: 256 },
      { tenant: 'client3', arrival: uniform(1.5), input: 256, output: 256 },
    ],
  },
  'vtc-on-off-less': {
    description:
      'VTC Figure 5: client 1 at 30 req/min in 60 s ON / 60 s OFF phases (under its share), client 2 at 120 req/min always ON',
    durationS: 600,
    seed: 42,
    cluster: A10G_VTC,
    tenants: tenants(2),
    streams: [
      {
        tenant: 'client1',
        arrival: { ...uniform(0.5), onOff: { onS: 60, offS: 60 } },
        input: 256,
        output: 256,
      },
      { tenant: 'client2', arrival: uniform(2), input: 256, output: 256 },
    ],
  },
  'vtc-on-off-overload': {
    description:
      'VTC Figure 6: client 1 at 120 req/min in 60 s ON / 60 s OFF phases (over its share), client 2 at 180 req/min always ON',
    durationS: 600,
    seed: 42,
    cluster: A10G_VTC,
    tenants: tenants(2),
    streams: [
      {
        tenant: 'client1',
        arrival: { ...uniform(2), onOff: { onS: 60, offS: 60 } },
        input: 256,
        output: 256,
      },
      { tenant: 'client2', arrival: uniform(3), input: 256, output: 256 },
    ],
  },
  'vtc-poisson-short-long': {
    description:
      'VTC Figure 7: Poisson arrivals; client 1 sends 480 req/min of 64/64 tokens, client 2 sends 90 req/min of 256/256',
    durationS: 600,
    seed: 42,
    cluster: A10G_VTC,
    tenants: tenants(2),
    streams: [
      { tenant: 'client1', arrival: poisson(8), input: 64, output: 64 },
      { tenant: 'client2', arrival: poisson(1.5), input: 256, output: 256 },
    ],
  },
  'vtc-poisson-short-long-2': {
    description:
      'VTC Figure 8: Poisson arrivals; client 1 sends 480 req/min of 64 in / 512 out, client 2 sends 90 req/min of 512 in / 64 out',
    durationS: 600,
    seed: 42,
    cluster: A10G_VTC,
    tenants: tenants(2),
    streams: [
      { tenant: 'client1', arrival: poisson(8), input: 64, output: 512 },
      { tenant: 'client2', arrival: poisson(1.5), input: 512, output: 64 },
    ],
  },
  'vtc-increase': {
    description:
      'VTC Figure 9: client 1 at 30 req/min (uniform); client 2 ramps linearly from 12 to 120 req/min over 10 minutes',
    durationS: 600,
    seed: 42,
    cluster: A10G_VTC,
    tenants: tenants(2),
    streams: [
      { tenant: 'client1', arrival: uniform(0.5), input: 256, output: 256 },
      {
        tenant: 'client2',
        arrival: { process: 'uniform', ramp: { from: 0.2, to: 2 } },
        input: 256,
        output: 256,
      },
    ],
  },
  'vtc-dist-shift': {
    description:
      'VTC Figure 10: 15 minutes in three 5-minute phases: on/off (30 req/min ON/OFF vs 120), overload (60 vs 60), client 1 under its share (30 vs 90)',
    durationS: 900,
    seed: 42,
    cluster: A10G_VTC,
    tenants: tenants(2),
    streams: [
      {
        tenant: 'client1',
        name: 'client1-on-off',
        arrival: { ...uniform(0.5), onOff: { onS: 60, offS: 60 } },
        input: 256,
        output: 256,
        endS: 300,
      },
      { tenant: 'client2', name: 'client2-on-off', arrival: uniform(2), input: 256, output: 256, endS: 300 },
      {
        tenant: 'client1',
        name: 'client1-overload',
        arrival: uniform(1),
        input: 256,
        output: 256,
        startS: 300,
        endS: 600,
      },
      {
        tenant: 'client2',
        name: 'client2-overload',
        arrival: uniform(1),
        input: 256,
        output: 256,
        startS: 300,
        endS: 600,
      },
      {
        tenant: 'client1',
        name: 'client1-less',
        arrival: uniform(0.5),
        input: 256,
        output: 256,
        startS: 600,
      },
      {
        tenant: 'client2',
        name: 'client2-more',
        arrival: uniform(1.5),
        input: 256,
        output: 256,
        startS: 600,
      },
    ],
  },
  'vtc-ablation-35000-256': ablation(35_000, 256, [3, 6]),
  'vtc-ablation-35000-512': ablation(35_000, 512, [1.5, 3]),
  'vtc-ablation-35000-768': ablation(35_000, 768, [1, 2]),
  'vtc-ablation-65000-512': ablation(65_000, 512, [2, 4]),
  'vtc-real-trace': {
    description:
      "VTC section 5.3 replayed from the artifact's published request trace: 1,500 requests of 27 clients over 600 s " +
      '(150 req/min; arrival time, client, input and output length per request), max_tokens = output',
    durationS: 600,
    seed: 42,
    cluster: A10G_VTC,
    trace: { name: 'vtc-artifact-real', maxTokens: 'output' },
  },
  'vtc-real': {
    description:
      'Like VTC section 5.3 (27 clients of a chat service, 210 req/min over 10 minutes, mean 136 in / 256 out): ' +
      'three dominant clients whose shares shift over three 200 s eras, a Zipf(1) tail of 24, ' +
      'bursty Gamma(CV 2) arrivals, lognormal lengths clipped to [2,1021] / [2,977]',
    durationS: 600,
    seed: 42,
    cluster: A10G_VTC,
    tenants: tenants(27),
    streams: realStreams(),
  },
};

/**
 * 27 chat clients sharing 3.5 req/s (210 req/min), as in VTC section 5.3, where "a few clients have
 * sent many more requests than others" and "the request rate of individual clients and the total
 * request rate are all highly dynamic". The LMSYS Chatbot Arena trace the paper samples is not
 * redistributable here, so: three dominant clients whose shares shift by era ({@link REAL_ERAS}),
 * a stationary Zipf(1) tail, Gamma arrivals with CV 2 (bursty), and lengths lognormal with the
 * paper's means (136 in, 256 out) and ranges ([2,1021], [2,977], its Figure 20).
 */
function realStreams(): ScenarioInput['streams'] {
  const n = 27;
  const tail = Array.from({ length: n - 3 }, (_, k) => 1 / (k + 1));
  const h = tail.reduce((a, b) => a + b, 0);
  const streams: NonNullable<ScenarioInput['streams']> = [];
  for (const era of REAL_ERAS) {
    const rest = 1 - era.top.reduce((a, b) => a + b, 0);
    const shares = [...era.top, ...tail.map((w) => (rest * w) / h)];
    shares.forEach((share, i) => {
      if (share <= 0) return;
      streams.push({
        tenant: `client${i + 1}`,
        name: `client${i + 1}-${era.startS}s`,
        startS: era.startS,
        endS: era.endS,
        arrival: { process: 'gamma' as const, rate: 3.5 * share, cv: 2 },
        input: { kind: 'lognormal' as const, mean: 136, sigma: 1, min: 2, max: 1021 },
        output: { kind: 'lognormal' as const, mean: 256, sigma: 0.8, min: 2, max: 977 },
        // The artifact sends max_new_tokens = the sampled output length, so memory is reserved exactly.
        maxTokens: 'output' as const,
      });
    });
  }
  return streams;
}
