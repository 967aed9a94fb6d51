import { createRng } from '@fairway/core';
import { describe, expect, it } from 'vitest';
import type { EngineConfig, EngineEvent, EngineSeqInput } from '../src/engine-api.ts';
import { EngineModel } from '../src/engine-model.ts';
import { IdealPrefixCache } from '../src/prefix-cache.ts';

const A100 = { gpu: 'A100-80GB', model: 'llama-2-7b' } as const;
const BS = 16;

/**
 * Chained block hashes of a token stream whose content is named `stream`: block i's name covers
 * every token up to the end of block i, as a chained hash does. `tokens` is how much of the stream
 * the sequence knows; only full blocks have a hash.
 */
function chain(stream: string, tokens: number): string[] {
  return Array.from({ length: Math.floor(tokens / BS) }, (_, i) => `${stream}/${i}`);
}

interface Run {
  /** Model ms from the start of the run to each sequence's first token. */
  readonly firstTokenMs: Map<string, number>;
  readonly finished: Map<string, Extract<EngineEvent, { kind: 'finished' }>>;
  /** Prompt tokens prefilled over the run. */
  readonly prefilled: number;
  readonly timeMs: number;
}

/** Steps the engine until idle; `afterStep` sees the engine after every step. */
function run(engine: EngineModel, afterStep?: () => void): Run {
  let timeMs = 0;
  let prefilled = 0;
  const firstTokenMs = new Map<string, number>();
  const finished = new Map<string, Extract<EngineEvent, { kind: 'finished' }>>();
  for (let steps = 0; engine.hasWork(); steps++) {
    if (steps > 1_000_000) throw new Error('engine does not terminate');
    const r = engine.step();
    timeMs += r.durationMs;
    prefilled += r.shape.prefillTokens;
    for (const e of r.events) {
      if (e.kind === 'first-token') firstTokenMs.set(e.id, timeMs);
      if (e.kind === 'finished') finished.set(e.id, e);
    }
    afterStep?.();
  }
  return { firstTokenMs, finished, prefilled, timeMs };
}

function seq(id: string, input: number, output: number, blockHashes?: string[]): EngineSeqInput {
  return {
    id,
    inputTokens: input,
    outputTokens: output,
    maxTokens: output,
    ...(blockHashes ? { blockHashes } : {}),
  };
}

describe('EngineModel prefix caching (vLLM automatic prefix caching)', () => {
  it('prefills only the new tokens of a second turn that resends the first turn and its answer', () => {
    const serve = (enablePrefixCaching: boolean): { turn1: Run; turn2: Run } => {
      const engine = new EngineModel({ ...A100, enablePrefixCaching });
      // Turn 1: 1000 prompt tokens, a 200-token answer; the conversation's blocks are known to the
      // end of the answer, which the second turn resends followed by 100 new tokens.
      engine.add(seq('turn1', 1000, 200, chain('conv', 1200)));
      const turn1 = run(engine);
      engine.add(seq('turn2', 1300, 10, chain('conv', 1300)));
      return { turn1, turn2: run(engine) };
    };
    const on = serve(true);
    const off = serve(false);
    // The answer's last token is generated but never fed back, so the first turn filled
    // ⌊1199 / 16⌋ = 74 blocks: 1184 tokens hit, and the 116 after them (the 100 new tokens and the
    // answer's last partial block) are prefilled.
    expect(on.turn2.finished.get('turn2')?.cachedTokens).toBe(1184);
    expect(on.turn2.prefilled).toBe(1300 - 1184);
    expect(off.turn2.prefilled).toBe(1300);
    expect(off.turn2.finished.get('turn2')?.cachedTokens).toBeUndefined();
    // The first turn found nothing and behaves exactly as without the cache.
    expect(on.turn1.finished.get('turn1')?.cachedTokens).toBe(0);
    expect(on.turn1.timeMs).toBe(off.turn1.timeMs);
    expect(on.turn2.firstTokenMs.get('turn2')!).toBeLessThan(off.turn2.firstTokenMs.get('turn2')! / 3);
  });

  it('recomputes the last block of a prompt found whole in the cache: the last token needs logits', () => {
    const engine = new EngineModel({ ...A100, enablePrefixCaching: true });
    engine.add(seq('a', 64, 1, chain('p', 64)));
    run(engine);
    engine.add(seq('b', 64, 1, chain('p', 64)));
    const again = run(engine);
    expect(again.finished.get('b')?.cachedTokens).toBe(48);
    expect(again.prefilled).toBe(16);
    const s = engine.stats();
    expect(s.prefixCacheQueriesTotal).toBe(128);
    expect(s.prefixCacheHitsTotal).toBe(48);
  });

  it('shares a cached block a running sequence holds instead of copying it', () => {
    const engine = new EngineModel({ ...A100, enablePrefixCaching: true });
    // A 320-token system prompt (20 blocks) both requests start with.
    engine.add(seq('a', 320, 50, [...chain('sys', 320), ...chain('a', 370).slice(20)]));
    engine.step(); // a's prefill
    const before = engine.auditKvBlocks();
    expect(before.inUse).toBe(20);
    engine.add(seq('b', 352, 5, [...chain('sys', 320), ...chain('b', 352).slice(20)]));
    const admitted = engine.step(); // b's prefill: a prefill-priority step runs no decode
    expect(admitted.shape.prefillTokens).toBe(32);
    const after = engine.auditKvBlocks();
    // b holds 22 blocks of which 20 are a's: only 2 are new.
    expect(after.inUse).toBe(before.inUse + 2);
    expect(after.refErrors).toBe(0);
    expect(engine.stats().kvUsedTokens).toBe(after.inUse * BS);
    const rest = run(engine);
    expect(rest.finished.get('b')?.cachedTokens).toBe(320);
    expect(engine.auditKvBlocks()).toMatchObject({ inUse: 0, refErrors: 0 });
  });

  it('keeps freed blocks cached and evicts the least recently freed first, a sequence’s tail first', () => {
    // 20 blocks, no watermark: memory pressure comes quickly.
    const engine = new EngineModel({
      ...A100,
      kvCapacityTokens: 20 * BS,
      watermark: 0,
      enablePrefixCaching: true,
    });
    engine.add(seq('x', 96, 1, chain('x', 96)));
    run(engine);
    engine.add(seq('y', 96, 1, chain('y', 96)));
    run(engine);
    // Both finished: their 12 blocks are free for anyone but still cached.
    expect(engine.auditKvBlocks()).toEqual({ total: 20, inUse: 0, free: 8, cachedFree: 12, refErrors: 0 });
    expect(engine.stats().kvUsedTokens).toBe(0);
    // 10 blocks of an unrelated prompt: 8 truly free ones, then x's last two blocks are evicted.
    engine.add(seq('z', 160, 1));
    run(engine);
    expect(engine.auditKvBlocks()).toMatchObject({ free: 10, cachedFree: 10 });
    engine.add(seq('x2', 96, 1, chain('x', 96)));
    engine.add(seq('y2', 96, 1, chain('y', 96)));
    const back = run(engine);
    expect(back.finished.get('x2')?.cachedTokens).toBe(4 * BS);
    // y was freed after x: untouched, and hit up to its last token's block.
    expect(back.finished.get('y2')?.cachedTokens).toBe(5 * BS);
  });

  it('evicts cached blocks before preempting a running sequence when a decode needs a block', () => {
    const engine = new EngineModel({
      ...A100,
      kvCapacityTokens: 10 * BS,
      watermark: 0,
      enablePrefixCaching: true,
    });
    engine.add(seq('old', 64, 1, chain('old', 64)));
    run(engine);
    expect(engine.auditKvBlocks().cachedFree).toBe(4);
    // 96 prompt tokens take 6 blocks; 4 more decode blocks come from evicting old's blocks.
    engine.add(seq('long', 96, 64, chain('long', 160)));
    const r = run(engine);
    expect(engine.stats().preemptionsTotal).toBe(0);
    expect(r.finished.get('long')?.generated).toBe(64);
  });

  it('admits a sequence only when its new blocks and the free blocks its hit takes fit together', () => {
    const engine = new EngineModel({
      ...A100,
      kvCapacityTokens: 10 * BS,
      watermark: 0,
      enablePrefixCaching: true,
    });
    engine.add(seq('old', 64, 1, chain('old', 64)));
    run(engine);
    // 6 blocks truly free, 4 free but cached. hog takes the 6 (its one decode fits in them); again would hit old's 4 cached
    // blocks and need 1 more: 5 blocks leave the free pool, and only 4 are free.
    engine.add(seq('hog', 95, 2));
    engine.add(seq('again', 80, 1, chain('old', 80)));
    const first = engine.step();
    expect(first.events.filter((e) => e.kind === 'scheduled').map((e) => e.id)).toEqual(['hog']);
    expect(engine.auditKvBlocks()).toEqual({ total: 10, inUse: 6, free: 0, cachedFree: 4, refErrors: 0 });
    const rest = run(engine);
    expect(rest.finished.get('again')?.cachedTokens).toBe(64);
  });

  it('runs a planned batch without looking the cache up, and still caches what it computes', () => {
    const engine = new EngineModel({ ...A100, enablePrefixCaching: true });
    engine.add(seq('a', 64, 1, chain('p', 64)));
    run(engine);
    engine.add(seq('b', 64, 1, chain('p', 64)));
    // The plan prefills b's whole prompt: a planner knows nothing of the cache.
    const r = engine.stepPlanned({ run: [{ id: 'b', tokens: 64 }] });
    expect(r.shape.prefillTokens).toBe(64);
    expect(r.events).toContainEqual({ kind: 'finished', id: 'b', generated: 1, cachedTokens: 0 });
    expect(engine.auditKvBlocks()).toEqual({
      total: engine.stats().numGpuBlocks,
      inUse: 0,
      free: engine.stats().numGpuBlocks - 4,
      cachedFree: 4,
      refErrors: 0,
    });
    expect(engine.stats().prefixCacheQueriesTotal).toBe(64);
  });

  it('changes nothing for sequences without block hashes', () => {
    const workload = (engine: EngineModel): void => {
      const rng = createRng(3);
      for (let i = 0; i < 60; i++) engine.add(seq(`r${i}`, rng.int(1, 700), rng.int(1, 300)));
    };
    const on = new EngineModel({ ...A100, kvCapacityTokens: 3000, enablePrefixCaching: true });
    const off = new EngineModel({ ...A100, kvCapacityTokens: 3000 });
    workload(on);
    workload(off);
    const a = run(on);
    const b = run(off);
    expect(a.timeMs).toBe(b.timeMs);
    expect(a.prefilled).toBe(b.prefilled);
    expect(on.stats().preemptionsTotal).toBe(off.stats().preemptionsTotal);
    expect(on.stats().prefixCacheHitsTotal).toBe(0);
  });

  it('keeps every KV block accounted for, shared and cached ones included, under random workloads', () => {
    const variants: Partial<EngineConfig>[] = [
      { batchPolicy: 'prefill-priority' },
      { batchPolicy: 'prefill-priority', chunkedPrefill: true, maxNumBatchedTokens: 512 },
      { batchPolicy: 'decode-priority', maxNumPrefillTokens: 256 },
      { batchPolicy: 'prefill-priority', preemptionVictim: 'cheapest-refill' },
      { batchPolicy: 'decode-priority', preemption: 'eviction-free' },
    ];
    let preemptions = 0;
    for (const seed of [1, 2, 3]) {
      for (const variant of variants) {
        const rng = createRng(seed);
        const engine = new EngineModel({
          ...A100,
          kvCapacityTokens: 3200,
          maxNumBatchedTokens: 1024,
          enablePrefixCaching: true,
          ...variant,
        });
        const inputs = new Map<string, number>();
        const cached = new Map<string, number>();
        const step = (): void => {
          for (const e of engine.step().events) if (e.kind === 'finished') cached.set(e.id, e.cachedTokens!);
          const a = engine.auditKvBlocks();
          expect(a.inUse + a.free + a.cachedFree).toBe(a.total);
          expect(a.free).toBeGreaterThanOrEqual(0);
          expect(a.refErrors).toBe(0);
          expect(engine.stats().kvUsedTokens).toBe(a.inUse * BS);
        };
        // Requests share one of three system prompts, some continue an earlier conversation.
        const systems = [64, 200, 513].map((n, k) => ({ stream: `sys${k}`, tokens: n }));
        let prompted = 0;
        for (let i = 0; i < 120; i++) {
          const sys = systems[rng.int(0, 2)]!;
          const input = sys.tokens + rng.int(1, 600);
          const output = rng.int(1, 200);
          const stream = rng.next() < 0.3 ? `conv${rng.int(0, 5)}` : `req${i}`;
          const blockHashes = chain(`${sys.stream}+${stream}`, input + output).map((h, b) =>
            (b + 1) * BS <= sys.tokens ? `${sys.stream}/${b}` : h,
          );
          engine.add({
            id: `r${i}`,
            inputTokens: input,
            outputTokens: output,
            maxTokens: output + 20,
            blockHashes,
          });
          inputs.set(`r${i}`, input);
          prompted += input;
          while (engine.hasWork() && rng.next() < 0.8) step();
        }
        while (engine.hasWork()) step();
        expect(engine.auditKvBlocks()).toMatchObject({ inUse: 0, refErrors: 0 });
        let hits = 0;
        for (const [id, input] of inputs) {
          const c = cached.get(id)!;
          expect(c % BS).toBe(0);
          expect(c).toBeLessThanOrEqual(input - 1);
          hits += c;
        }
        const s = engine.stats();
        expect(s.prefixCacheQueriesTotal).toBe(prompted);
        expect(s.prefixCacheHitsTotal).toBe(hits);
        expect(hits).toBeGreaterThan(0);
        expect(s.requestsFinishedTotal).toBe(120);
        preemptions += s.preemptionsTotal;
      }
    }
    // The workloads are tight enough that sequences holding shared blocks get preempted.
    expect(preemptions).toBeGreaterThan(0);
  });
});

describe('EngineModel with an ideal prefix cache (a what-if shared by a fleet)', () => {
  it('finds on one engine what another computed, prefills only the rest and holds no KV for the hit', () => {
    const ideal = new IdealPrefixCache();
    const a = new EngineModel({ ...A100, kvCapacityTokens: 4096 }, 'a', { idealCache: ideal });
    const b = new EngineModel({ ...A100, kvCapacityTokens: 4096 }, 'b', { idealCache: ideal });
    a.add(seq('first', 160, 4, chain('conv', 160)));
    const first = run(a);
    expect(first.prefilled).toBe(160);
    expect(first.finished.get('first')?.cachedTokens).toBe(0);

    // The second turn resends the first's 160 tokens and 4 of answer, plus 36 new ones: 200 tokens,
    // of which the 10 full blocks of the first turn hit although engine b never computed them.
    b.add(seq('second', 200, 8, chain('conv', 200)));
    let peakBlocks = 0;
    const second = run(b, () => {
      const audit = b.auditKvBlocks();
      expect(audit.inUse + audit.free + audit.cachedFree).toBe(audit.total);
      peakBlocks = Math.max(peakBlocks, audit.inUse);
    });
    expect(second.finished.get('second')?.cachedTokens).toBe(160);
    expect(second.prefilled).toBe(40);
    // 200 prompt + 7 fed-back output tokens need 13 blocks; the 10 hit blocks hold none of b's KV.
    expect(peakBlocks).toBe(3);
    expect(b.auditKvBlocks()).toMatchObject({ inUse: 0, refErrors: 0 });
    expect(b.stats()).toMatchObject({
      prefixCaching: true,
      prefixCacheQueriesTotal: 200,
      prefixCacheHitsTotal: 160,
    });
  });

  it('never evicts: a prompt computed long ago still hits after the KV was filled many times over', () => {
    const ideal = new IdealPrefixCache();
    const engine = new EngineModel({ ...A100, kvCapacityTokens: 512 }, 'e', { idealCache: ideal });
    engine.add(seq('old', 160, 1, chain('old', 160)));
    for (let i = 0; i < 20; i++) engine.add(seq(`filler${i}`, 400, 1, chain(`filler${i}`, 400)));
    run(engine);
    engine.add(seq('again', 170, 1, chain('old', 170)));
    expect(run(engine).finished.get('again')?.cachedTokens).toBe(160);
    expect(ideal.size).toBe(10 + 20 * 25);
  });
});
