import { xoroshiro128plusFromState } from 'pure-rand/generator/xoroshiro128plus';

/**
 * Seeded random source. Every random choice in fairway goes through one of these so that a seed
 * replays a simulation byte for byte.
 */
export interface Rng {
  /** Uniform in [0, 1). */
  next(): number;
  /** Uniform integer in [min, max] (inclusive). */
  int(min: number, max: number): number;
  /** Standard normal (mean 0, variance 1). */
  normal(): number;
  /** Exponential with the given rate (mean 1/rate). */
  exponential(rate: number): number;
  /** An independent stream derived from this seed and a label, stable across runs. */
  fork(label: string): Rng;
}

function hashLabel(label: string): number {
  // FNV-1a, 32 bit: stable, cheap, good enough to separate named streams.
  let h = 0x811c9dc5;
  for (let i = 0; i < label.length; i++) {
    h ^= label.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/**
 * One SplitMix32 step (Steele, Lea & Flood, "Fast splittable pseudorandom number generators",
 * OOPSLA 2014, 32-bit variant with MurmurHash3's finaliser): advances `state` by the golden-ratio
 * increment and returns the mixed output. Used only to expand a seed into xoroshiro's 128-bit state,
 * so that nearby seeds (1, 2, 3, …) start uncorrelated streams: pure-rand's `xoroshiro128plus(seed)`
 * puts the seed into the state unmixed, and its first outputs for seeds n and n+1 differ by one.
 */
function splitMix32(state: { s: number }): number {
  state.s = (state.s + 0x9e3779b9) | 0;
  let z = state.s;
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
  return (z ^ (z >>> 16)) >>> 0;
}

/** xoroshiro128+'s four 32-bit state words from a 32-bit seed, through SplitMix32 (never all zero). */
function seedState(seed: number): number[] {
  const st = { s: seed | 0 };
  const words = [splitMix32(st), splitMix32(st), splitMix32(st), splitMix32(st)].map((w) => w | 0);
  return words.some((w) => w !== 0) ? words : [1, 0, 0, 0];
}

class XoroshiroRng implements Rng {
  readonly #seed: number;
  readonly #gen: ReturnType<typeof xoroshiro128plusFromState>;
  #spare: number | undefined;

  constructor(seed: number) {
    this.#seed = seed >>> 0;
    this.#gen = xoroshiro128plusFromState(seedState(this.#seed));
  }

  next(): number {
    // 53 random bits from two 32-bit outputs.
    const hi = this.#gen.next() >>> 5;
    const lo = this.#gen.next() >>> 6;
    return (hi * 67108864 + lo) / 9007199254740992;
  }

  int(min: number, max: number): number {
    return min + Math.floor(this.next() * (max - min + 1));
  }

  normal(): number {
    if (this.#spare !== undefined) {
      const s = this.#spare;
      this.#spare = undefined;
      return s;
    }
    let u = 0;
    let v = 0;
    let s = 0;
    do {
      u = this.next() * 2 - 1;
      v = this.next() * 2 - 1;
      s = u * u + v * v;
    } while (s >= 1 || s === 0);
    const m = Math.sqrt((-2 * Math.log(s)) / s);
    this.#spare = v * m;
    return u * m;
  }

  exponential(rate: number): number {
    return -Math.log(1 - this.next()) / rate;
  }

  fork(label: string): Rng {
    return new XoroshiroRng((this.#seed ^ hashLabel(label)) >>> 0);
  }
}

/** Creates a seeded RNG (xoroshiro128+ from `pure-rand`, its state expanded from `seed` by SplitMix32). */
export function createRng(seed: number): Rng {
  return new XoroshiroRng(seed);
}
