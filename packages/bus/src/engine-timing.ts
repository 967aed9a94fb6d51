import type { Heartbeat } from './messages.ts';

/** How long a replica's engine timing is measured over, ms of the agent's clock. */
const TIMING_WINDOW_MS = 5_000;
/** Fewest decode tokens a window needs before its inter-token latency counts. */
const MIN_TOKENS = 32;
/** Fewest prefills a window needs before their mean time counts. */
const MIN_PREFILLS = 2;

/** Decode iterations as one window of a replica's heartbeats measured them. */
export interface DecodeTiming {
  /** Mean inter-token latency, ms (the engine's own histogram, in its clock). */
  readonly interTokenMs: number;
  /** Tokens the mean is over. */
  readonly tokens: number;
  /** Mean sequences running at the window's heartbeats. */
  readonly meanRunning: number;
  /** Mean KV tokens per running sequence at those heartbeats: the batch's context per sequence. */
  readonly meanContext: number;
}

/** Prefills as one window of a replica's heartbeats measured them. */
export interface PrefillTiming {
  /** Mean prefill time of a request, ms. */
  readonly prefillMs: number;
  /** Prefills the mean is over. */
  readonly prefills: number;
  /** Prompt tokens the engine processed per prefill in the window. */
  readonly meanPromptTokens: number;
}

/** What a replica's engine measured of its own speed, from the last windows that saw enough. */
export interface EngineTiming {
  readonly decode: DecodeTiming | undefined;
  readonly prefill: PrefillTiming | undefined;
}

interface Start {
  readonly ts: number;
  readonly itlSum: number;
  readonly itlCount: number;
  readonly prefillSum: number;
  readonly prefillCount: number;
  readonly promptTokens: number;
}

/**
 * Folds a replica's heartbeats into windows of {@link TIMING_WINDOW_MS} and keeps, per phase, the
 * last window that saw enough of it (a quiet window keeps the earlier figure: an idle engine did
 * not get faster). Differences of the engine's cumulative histograms, so heartbeats lost between
 * two others cost nothing; a counter that went back (the engine restarted) starts a new window.
 */
export class EngineTimingWindow {
  #start: Start | undefined;
  #runningSum = 0;
  #kvSum = 0;
  #samples = 0;
  #decode: DecodeTiming | undefined;
  #prefill: PrefillTiming | undefined;

  get timing(): EngineTiming | undefined {
    return this.#decode === undefined && this.#prefill === undefined
      ? undefined
      : { decode: this.#decode, prefill: this.#prefill };
  }

  observe(h: Heartbeat): void {
    const s = this.#start;
    if (
      s === undefined ||
      h.ts < s.ts ||
      h.interTokensTotal < s.itlCount ||
      h.prefillsTotal < s.prefillCount ||
      h.promptTokensTotal < s.promptTokens
    ) {
      this.#restart(h);
      return;
    }
    if (h.running > 0) {
      this.#runningSum += h.running;
      this.#kvSum += h.kvUsedTokens;
      this.#samples++;
    }
    if (h.ts - s.ts < TIMING_WINDOW_MS) return;
    const tokens = h.interTokensTotal - s.itlCount;
    if (tokens >= MIN_TOKENS && this.#samples > 0) {
      this.#decode = {
        interTokenMs: ((h.interTokenSecondsTotal - s.itlSum) * 1000) / tokens,
        tokens,
        meanRunning: this.#runningSum / this.#samples,
        meanContext: this.#kvSum / this.#runningSum,
      };
    }
    const prefills = h.prefillsTotal - s.prefillCount;
    if (prefills >= MIN_PREFILLS) {
      this.#prefill = {
        prefillMs: ((h.prefillSecondsTotal - s.prefillSum) * 1000) / prefills,
        prefills,
        meanPromptTokens: (h.promptTokensTotal - s.promptTokens) / prefills,
      };
    }
    this.#restart(h);
  }

  #restart(h: Heartbeat): void {
    this.#start = {
      ts: h.ts,
      itlSum: h.interTokenSecondsTotal,
      itlCount: h.interTokensTotal,
      prefillSum: h.prefillSecondsTotal,
      prefillCount: h.prefillsTotal,
      promptTokens: h.promptTokensTotal,
    };
    this.#runningSum = 0;
    this.#kvSum = 0;
    this.#samples = 0;
  }
}
