import type { WindowLimit } from '@fairway/store';
import { describe, expect, it } from 'vitest';
import { AdmissionLog } from '../src/state-recovery.ts';

const rpm: WindowLimit = { key: 'rpm:a', limit: 10, amount: 1, windowMs: 1000, code: 'rpm_limited' };
const tpm: WindowLimit = { key: 'tpm:a', limit: 1e6, amount: 300, windowMs: 5000, code: 'tpm_limited' };

describe('AdmissionLog', () => {
  it('gives back every entry still inside its window, at its admission time and amount', () => {
    const log = new AdmissionLog();
    log.record('x', 0, [rpm, tpm]);
    log.record('y', 500, [rpm]);
    expect(log.entries(900)).toEqual([
      { key: 'rpm:a', id: 'x', atMs: 0, windowMs: 1000, amount: 1 },
      { key: 'tpm:a', id: 'x', atMs: 0, windowMs: 5000, amount: 300 },
      { key: 'rpm:a', id: 'y', atMs: 500, windowMs: 1000, amount: 1 },
    ]);
    // x's RPM entry left its window at 1000; its TPM entry stays until 5000.
    expect(log.entries(1200)).toEqual([
      { key: 'tpm:a', id: 'x', atMs: 0, windowMs: 5000, amount: 300 },
      { key: 'rpm:a', id: 'y', atMs: 500, windowMs: 1000, amount: 1 },
    ]);
    expect(log.entries(5000)).toEqual([]);
    expect(log.size).toBe(0);
  });

  it('replaces true-up amounts (TPM) when a request settles or is cancelled, not the others', () => {
    const log = new AdmissionLog();
    log.record('x', 0, [rpm, tpm]);
    log.trueUp('x', 42);
    expect(log.entries(1).map((e) => e.amount)).toEqual([1, 42]);
    expect(log.windowsOf('x')).toEqual([
      { key: 'rpm:a', trueUp: false, atMs: 0, windowMs: 1000, amount: 1 },
      { key: 'tpm:a', trueUp: true, atMs: 0, windowMs: 5000, amount: 42 },
    ]);
  });

  it('keeps nothing for admissions without limits', () => {
    const log = new AdmissionLog();
    log.record('x', 0, []);
    expect(log.size).toBe(0);
    expect(log.windowsOf('x')).toEqual([]);
  });
});
