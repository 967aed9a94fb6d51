/**
 * Workloads after QLM's evaluation (Patke et al., SoCC 2024, section 8), on simulated A100-80GB
 * replicas with ShareGPT-like lognormal lengths (QLM Figure 8: prompts of a few hundred tokens,
 * outputs of a few hundred, long tails) and QLM's three SLO classes (interactive 20 s, batch-1
 * 1 min, batch-2 1 h TTFT):
 *
 * - `qlm-mixed` (QLM W_A, single model): bursty interactive chat traffic beside batch-1 jobs that,
 *   with it, exceed what the two replicas serve, and a dump of long batch-2 documents in the first
 *   minute that fills the KV caches (head-of-line blocking); the order of the queue and eviction
 *   decide who meets its SLO.
 * - `qlm-hetero`: `qlm-mixed`'s traffic for Llama-2-7B on a fleet of unequal replicas (one
 *   A100-80GB, two A10G-24GB with a third of its KV cache each), for five minutes: where eviction
 *   pays and where it only churns.
 * - `qlm-multi-model` (QLM W_B): batch-1 and batch-2 traffic for three models on four replicas of
 *   one GPU type, every replica able to load every model (vLLM sleep/wake), so serving means
 *   swapping and the swap count decides throughput.
 *
 * Every request sets `max_tokens` to its true output length, so reservations are exact and the
 * comparison is about queue order, not prediction error.
 */
import type { ScenarioInput } from './scenario-schema.ts';

const chatIn = { kind: 'lognormal' as const, median: 250, p90: 900, min: 8, max: 3000 };
const chatOut = { kind: 'lognormal' as const, median: 180, p90: 500, min: 4, max: 1024 };
const docIn = { kind: 'lognormal' as const, median: 2500, p90: 3000, min: 64, max: 3500 };
const docOut = { kind: 'lognormal' as const, median: 900, p90: 1024, min: 16, max: 1024 };

/** `qlm-mixed`'s tenants and traffic, shared by `qlm-hetero`. */
const MIXED_TENANTS = [
  { id: 'chat-a' },
  { id: 'chat-b' },
  { id: 'jobs-a' },
  { id: 'jobs-b' },
  { id: 'docs' },
];
const MIXED_STREAMS: ScenarioInput['streams'] = [
  {
    tenant: 'chat-a',
    sloClass: 'interactive',
    arrival: { process: 'gamma', rate: 1.8, cv: 3 },
    input: chatIn,
    output: chatOut,
    maxTokens: 'output',
  },
  {
    tenant: 'chat-b',
    sloClass: 'interactive',
    arrival: { process: 'gamma', rate: 1.2, cv: 3 },
    input: chatIn,
    output: chatOut,
    maxTokens: 'output',
  },
  {
    tenant: 'jobs-a',
    sloClass: 'batch-1',
    arrival: { process: 'poisson', rate: 5 },
    input: chatIn,
    output: chatOut,
    maxTokens: 'output',
  },
  {
    tenant: 'jobs-b',
    sloClass: 'batch-1',
    arrival: { process: 'poisson', rate: 5 },
    input: chatIn,
    output: chatOut,
    maxTokens: 'output',
  },
  {
    tenant: 'docs',
    sloClass: 'batch-2',
    arrival: { process: 'poisson', rate: 12 },
    input: docIn,
    output: docOut,
    maxTokens: 'output',
    endS: 60,
  },
];

/** Built-in QLM scenarios by name. */
export const QLM_SCENARIOS: Readonly<Record<string, ScenarioInput>> = {
  'qlm-mixed': {
    description:
      'QLM W_A: interactive (20 s, bursty), batch-1 (1 min, overloading) and a batch-2 document dump (1 h) on 2x A100-80GB llama-2-13b',
    durationS: 600,
    seed: 7,
    cluster: { engines: [{ gpu: 'A100-80GB', model: 'llama-2-13b', tp: 1, count: 2 }] },
    tenants: MIXED_TENANTS,
    streams: MIXED_STREAMS,
  },
  'qlm-hetero': {
    description:
      "qlm-mixed's traffic (interactive 20 s, batch-1 1 min, batch-2 dump 1 h) on unequal replicas: 1x A100-80GB + 2x A10G-24GB llama-2-7b",
    durationS: 300,
    seed: 7,
    cluster: {
      engines: [
        { gpu: 'A100-80GB', model: 'llama-2-7b', tp: 1, count: 1 },
        { gpu: 'A10G-24GB', model: 'llama-2-7b', tp: 1, count: 2 },
      ],
    },
    tenants: MIXED_TENANTS,
    streams: MIXED_STREAMS,
  },
  'qlm-multi-model': {
    description:
      'QLM W_B: batch-1 and batch-2 for three models (llama-2-7b, llama-2-13b, llama-3-8b) on 4x A100-80GB that swap models (sleep/wake); demand shifts from 7b to 13b halfway',
    durationS: 900,
    seed: 11,
    cluster: {
      engines: [
        { gpu: 'A100-80GB', model: 'llama-2-7b', tp: 1, count: 2 },
        { gpu: 'A100-80GB', model: 'llama-2-13b', tp: 1, count: 1 },
        { gpu: 'A100-80GB', model: 'llama-3-8b', tp: 1, count: 1 },
      ],
    },
    tenants: [{ id: 'etl' }, { id: 'summaries' }, { id: 'review' }, { id: 'codegen' }, { id: 'archive' }],
    streams: [
      {
        tenant: 'etl',
        sloClass: 'batch-1',
        model: 'llama-2-7b',
        arrival: { process: 'poisson', rate: 14 },
        input: chatIn,
        output: chatOut,
        maxTokens: 'output',
        endS: 450,
      },
      {
        tenant: 'summaries',
        sloClass: 'batch-1',
        model: 'llama-3-8b',
        arrival: { process: 'poisson', rate: 5 },
        input: chatIn,
        output: chatOut,
        maxTokens: 'output',
      },
      {
        tenant: 'review',
        sloClass: 'batch-1',
        model: 'llama-2-13b',
        arrival: { process: 'poisson', rate: 12 },
        input: chatIn,
        output: chatOut,
        maxTokens: 'output',
        startS: 450,
      },
      {
        tenant: 'codegen',
        sloClass: 'batch-2',
        model: 'llama-2-13b',
        arrival: { process: 'poisson', rate: 2 },
        input: chatIn,
        output: chatOut,
        maxTokens: 'output',
      },
      {
        tenant: 'archive',
        sloClass: 'batch-2',
        model: 'llama-2-7b',
        arrival: { process: 'poisson', rate: 2 },
        input: chatIn,
        output: chatOut,
        maxTokens: 'output',
      },
    ],
  },
};
