import type { SchedulingStore, WindowLimit } from '../src/index.ts';
import { benchRequest } from './bench-requests.ts';

/** One window-limit call to measure: `setup` (untimed) prepares the state, `op(i)` is the i-th call. */
export interface WindowScenario {
  readonly label: string;
  readonly setup: () => Promise<void>;
  readonly op: (i: number) => Promise<void>;
}

const W = 60_000;
const rpm: WindowLimit = { key: 'rpm:tenant:t', limit: 600, amount: 1, windowMs: W, code: 'rpm_limited' };
const tpm: WindowLimit = {
  key: 'tpm:tenant:t',
  limit: 6000 * 100,
  amount: 100,
  windowMs: W,
  code: 'tpm_limited',
};
const oit: WindowLimit = {
  key: 'oit:user:u',
  limit: 600,
  amount: 1,
  windowMs: W,
  code: 'throttled',
  onlyWhenOverloaded: true,
};

/**
 * The window-limit calls both store benches measure, `calls` of each: admits refused by an RPM
 * window holding 600 entries, a TPM window holding 6,000, an OIT throttle window holding 600 (a
 * refused throttle arrival is counted too, so that window keeps filling as the flood goes on) and a
 * token quota; an admit that passes RPM and TPM; the settle that trues its TPM up.
 */
export function windowScenarios(store: SchedulingStore, calls: number, inFlight: number): WindowScenario[] {
  let seq = 0;
  const admit = (nowMs: number, limits: WindowLimit[], tenant: string, over: object = {}) =>
    store.admit({
      req: { ...benchRequest(seq), id: `win${seq++}`, pool: `win-${tenant}` },
      nowMs,
      lift: 'vtc',
      limits,
      overloaded: false,
      tenant,
      ...over,
    });
  /** Admits `n` requests spread evenly over one window, expecting each to pass. */
  const fill = async (n: number, limits: WindowLimit[], tenant: string): Promise<void> => {
    for (let i = 0; i < n; i += inFlight) {
      const rs = await Promise.all(
        Array.from({ length: Math.min(inFlight, n - i) }, (_, k) => admit(((i + k) * W) / n, limits, tenant)),
      );
      if (rs.some((r) => !r.ok)) throw new Error(`window bench: a fill admission of ${tenant} was refused`);
    }
  };
  const refused =
    (code: string, limits: WindowLimit[], tenant: string, over: object = {}) =>
    async () => {
      const r = await admit(W - 1, limits, tenant, over);
      if (r.ok || r.code !== code)
        throw new Error(`window bench: expected ${code}, got ${JSON.stringify(r)}`);
    };
  const quota = {
    usage: { key: 'sha256:k', model: 'm', day: '2026-11-25', month: '2026-11' },
    quotas: [
      {
        scope: 'tenant' as const,
        window: 'day' as const,
        kind: 'tokens' as const,
        budget: 100,
        amount: 300,
        resetAtMs: 1e13,
      },
    ],
  };
  const pass = (l: WindowLimit): WindowLimit => ({ ...l, key: `${l.key}:pass`, limit: 1e12 });
  let first = 0;
  return [
    {
      label: 'admit refused by RPM (600 in window)',
      setup: () => fill(600, [rpm], 'rpm'),
      op: refused('rpm_limited', [rpm], 'rpm'),
    },
    {
      label: 'admit refused by TPM (6,000 in window)',
      setup: () => fill(6000, [tpm], 'tpm'),
      op: refused('tpm_limited', [tpm], 'tpm'),
    },
    {
      label: 'admit refused by OIT throttle (600+ in window)',
      setup: () => fill(600, [oit], 'oit'),
      op: refused('throttled', [oit], 'oit', { overloaded: true }),
    },
    {
      label: 'admit refused by a token quota',
      setup: async () => undefined,
      op: refused('quota_exceeded', [], 'quota', quota),
    },
    {
      label: 'admit passing RPM + TPM',
      setup: async () => {
        first = seq;
      },
      op: async (i) => {
        const r = await admit(i * 10, [pass(rpm), pass(tpm)], 'pass');
        if (!r.ok) throw new Error('window bench: expected an admission');
      },
    },
    {
      label: 'settle (TPM true-up)',
      setup: async () => {
        for (let i = 0; i < calls; i++) {
          const d = await store.dispatch({
            pool: 'win-pass',
            bands: [0],
            ordering: 'fair',
            nowMs: calls * 10,
            picker: 'bench',
            replicas: [{ id: 'r1', tokenCapacity: 1e12, seqCapacity: 1e9 }],
            fit: 'first',
          });
          if (d.kind !== 'dispatched') throw new Error('window bench: expected a dispatch');
        }
      },
      op: async (i) => {
        const settled = await store.settle({
          id: `win${first + i}`,
          nowMs: calls * 10 + i,
          finalCost: 300,
          actualTokens: 350,
          outputTokens: 100,
        });
        if (!settled) throw new Error('window bench: expected a settlement');
      },
    },
  ];
}
