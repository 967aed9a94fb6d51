import { describe, expect, it } from 'vitest';
import {
  conditionalMeanOutput,
  OutputHistory,
  promptBucket,
  repredictOutput,
} from '../src/aladdin/output-repredict.ts';

describe('Aladdin re-prediction of an under-estimated output (section 4.3)', () => {
  it('averages only the past outputs longer than what the request has generated', () => {
    expect(conditionalMeanOutput([10, 20, 100, 300], 50)).toBe(200);
    expect(conditionalMeanOutput([10, 20, 100, 300], 5)).toBe(107.5);
    // Equal to what it has is not longer: it would have finished.
    expect(conditionalMeanOutput([10, 50], 50)).toBeUndefined();
    expect(conditionalMeanOutput([], 0)).toBeUndefined();
  });

  it('re-predicts the conditional mean, else twice the tokens so far, within (generated, maxTokens]', () => {
    expect(repredictOutput(50, 1000, 200)).toBe(200);
    expect(repredictOutput(50, 1000, 120.2)).toBe(121);
    expect(repredictOutput(50, 1000, undefined)).toBe(100);
    expect(repredictOutput(50, 80, undefined)).toBe(80);
    expect(repredictOutput(50, 1000, 50.5)).toBe(51);
  });

  it('buckets prompts by log2 of their length', () => {
    expect([1, 2, 3, 4, 1023, 1024].map(promptBucket)).toEqual([0, 1, 1, 2, 9, 10]);
    expect(promptBucket(0)).toBe(0);
  });

  it('keeps the last outputs per key and the most recently recorded keys', () => {
    const h = new OutputHistory({ perKey: 3, maxKeys: 2 });
    for (const o of [1000, 10, 20, 30]) h.record('a', o);
    // 1000 was overwritten: only 10, 20, 30 remain.
    expect(h.size('a')).toBe(3);
    expect(h.conditionalMean('a', 15)).toBe(25);
    expect(h.conditionalMean('a', 30)).toBeUndefined();
    h.record('b', 5);
    h.record('a', 40);
    h.record('c', 7);
    // b was the least recently recorded key.
    expect(h.size('b')).toBe(0);
    expect(h.conditionalMean('c', 0)).toBe(7);
    expect(h.conditionalMean('a', 25)).toBe(35);
  });
});
