import { DEFAULT_SLO_CLASSES, type RequestDescriptor } from '@fairway/core';
import { leastKvPlacement, vtcPolicy } from '@fairway/policy';
import { MemoryStore } from '@fairway/store';
import { describe, expect, it } from 'vitest';
import { runSimulation } from '../src/runner.ts';
import type { ControlOp, SloControl, SloControlContext } from '../src/slo-control.ts';

const A100 = { gpu: 'A100-80GB', model: 'llama-2-7b' };

function req(id: string, over: Partial<RequestDescriptor> = {}): RequestDescriptor {
  return {
    id,
    tenant: 't',
    model: 'llama-2-7b',
    sloClass: 'batch-2',
    inputTokens: 500,
    maxTokens: 400,
    outputTokens: 400,
    arrivalMs: 0,
    ...over,
  };
}

/** A control that returns scripted operations at given times and records what it is told. */
class ScriptedControl implements SloControl {
  readonly name = 'scripted';
  readonly intervalMs = 100;
  readonly router = undefined;
  readonly seen: string[] = [];
  ctx: SloControlContext | undefined;
  constructor(private readonly script: Record<number, (ctx: SloControlContext) => ControlOp[]>) {}
  start(ctx: SloControlContext): void {
    this.ctx = ctx;
  }
  onArrival(r: RequestDescriptor): void {
    this.seen.push(`arrive ${r.id}`);
  }
  onRejected(id: string): void {
    this.seen.push(`reject ${id}`);
  }
  onDispatched(id: string, replica: string): void {
    this.seen.push(`dispatch ${id} ${replica}`);
  }
  onEvicted(id: string, generated: number): void {
    this.seen.push(`evict ${id} ${generated}`);
  }
  onFinished(r: RequestDescriptor, generated: number): void {
    this.seen.push(`finish ${r.id} ${generated}`);
  }
  onSwapped(replica: string, model: string): void {
    this.seen.push(`swapped ${replica} ${model}`);
  }
  async tick(nowMs: number): Promise<readonly ControlOp[]> {
    return this.ctx ? (this.script[nowMs]?.(this.ctx) ?? []) : [];
  }
}

describe('runner executing an SLO control’s operations', () => {
  it('evicts a running request, re-queues it with its output, and resumes it to its full length', async () => {
    const store = new MemoryStore();
    const control = new ScriptedControl({
      1000: (ctx) => {
        const running = ctx.replicas()[0]?.running ?? [];
        expect(running.map((r) => r.req.id)).toEqual(['long']);
        expect(running[0]?.generated).toBeGreaterThan(10);
        return [{ kind: 'evict', replica: 'r0', requestIds: ['long'] }];
      },
    });
    const run = await runSimulation({
      scenario: 'evict',
      seed: 1,
      durationS: 60,
      engines: [{ id: 'r0', config: A100 }],
      arrivals: [req('long')],
      ordering: vtcPolicy(),
      placement: leastKvPlacement(),
      store,
      control,
    });
    const rec = run.records[0]!;
    expect(rec.generated).toBe(400);
    expect(rec.finishS).toBeDefined();
    expect(rec.evictions).toBe(1);
    const evicted = control.seen.find((s) => s.startsWith('evict'));
    expect(evicted).toMatch(/^evict long \d+$/);
    expect(control.seen.filter((s) => s.startsWith('dispatch'))).toHaveLength(2);
    expect(control.seen.at(-1)).toBe('finish long 400');
    // Charged exactly once for what it was served: input + 2·output under VTC's default cost.
    expect((await store.snapshot('llama-2-7b', 2)).counters.t).toBe(500 + 2 * 400);
  });

  it('drains a replica, spends the swap cost and then serves the other model’s pool', async () => {
    const control = new ScriptedControl({
      100: () => [{ kind: 'swap', replica: 'r0', to: 'llama-3-8b', costS: 5 }],
    });
    const run = await runSimulation({
      scenario: 'swap',
      seed: 1,
      durationS: 120,
      engines: [
        { id: 'r0', config: A100 },
        { id: 'r1', config: { gpu: 'A100-80GB', model: 'llama-3-8b' } },
      ],
      arrivals: [
        req('a', { outputTokens: 50, maxTokens: 50 }),
        ...Array.from({ length: 40 }, (_, i) =>
          req(`b${i}`, { model: 'llama-3-8b', arrivalMs: 20_000, outputTokens: 300, maxTokens: 300 }),
        ),
      ],
      ordering: vtcPolicy(),
      placement: leastKvPlacement(),
      sloClasses: DEFAULT_SLO_CLASSES,
      control,
    });
    expect(run.swaps).toBe(1);
    const a = run.records.find((r) => r.req.id === 'a')!;
    expect(a.replica).toBe('r0');
    expect(a.generated).toBe(50);
    const swappedAt = control.seen.indexOf('swapped r0 llama-3-8b');
    expect(swappedAt).toBeGreaterThan(control.seen.indexOf('finish a 50'));
    // After the swap r0 serves the llama-3-8b pool beside r1.
    const onR0 = run.records.filter((r) => r.req.model === 'llama-3-8b' && r.replica === 'r0');
    expect(onR0.length).toBeGreaterThan(0);
    expect(run.records.every((r) => r.finishS !== undefined)).toBe(true);
  });
});
