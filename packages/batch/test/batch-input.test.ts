import { describe, expect, it } from 'vitest';
import { BatchInputError, BatchInputParser, parseBatchInput } from '../src/batch-input.ts';
import { DEFAULT_BATCH_LIMITS } from '../src/batch-limits.ts';

const line = (id: string, extra: Record<string, unknown> = {}) =>
  JSON.stringify({
    custom_id: id,
    method: 'POST',
    url: '/v1/chat/completions',
    body: { model: 'm' },
    ...extra,
  });

function refusal(text: string, limits = DEFAULT_BATCH_LIMITS): BatchInputError {
  try {
    parseBatchInput(text, limits);
  } catch (err) {
    if (err instanceof BatchInputError) return err;
    throw err;
  }
  throw new Error('accepted');
}

describe('parseBatchInput', () => {
  it('reads every request line in order, skipping blank lines and CRLF endings', () => {
    const lines = parseBatchInput(
      `${line('a')}\r\n\n${line('b', { url: '/v1/completions' })}\n`,
      DEFAULT_BATCH_LIMITS,
    );
    expect(lines.map((l) => [l.custom_id, l.url])).toEqual([
      ['a', '/v1/chat/completions'],
      ['b', '/v1/completions'],
    ]);
  });

  it('names the first bad line and why', () => {
    expect(refusal(`${line('a')}\n{oops`)).toMatchObject({ line: 2, status: 400, param: 'file' });
    expect(refusal(`${line('a')}\n{oops`).message).toMatch(/^line 2: not valid JSON/);
    expect(refusal(`${line('a')}\n${line('a')}`).message).toBe(
      'line 2: duplicate custom_id "a": each line needs its own',
    );
    expect(refusal(line('a', { url: '/v1/responses' })).message).toBe(
      'line 1: url must be one of /v1/chat/completions, /v1/completions, /v1/embeddings',
    );
    expect(refusal(line('a', { method: 'GET' })).message).toBe('line 1: method must be "POST"');
    expect(refusal(line('', {})).message).toBe('line 1: custom_id must be a non-empty string');
    expect(refusal(line('a', { body: [] })).message).toBe('line 1: body must be a JSON object');
    expect(refusal(line('a', { body: {} })).message).toBe('line 1: body.model must be a non-empty string');
    expect(refusal(line('a', { body: { model: 'm', stream: true } })).message).toBe(
      'line 1: body.stream is not supported in a batch',
    );
    expect(refusal('[1,2]').message).toMatch(/^line 1: must be a JSON object/);
  });

  it('refuses an empty file and one over the line limit', () => {
    expect(refusal('\n \n')).toMatchObject({ line: null, message: 'the file holds no request lines' });
    const limits = { ...DEFAULT_BATCH_LIMITS, maxLines: 2 };
    expect(refusal([line('a'), line('b'), line('c')].join('\n'), limits).message).toBe(
      'a batch file holds at most 2 requests',
    );
    expect(refusal(line('x'.repeat(513))).message).toBe('line 1: custom_id must be at most 512 characters');
  });
});

describe('BatchInputParser', () => {
  it('reads lines split anywhere across chunks, multi-byte characters included', () => {
    const text = `${line('é-1')}\n${line('😀-2')}\n${line('plain')}`;
    const bytes = Buffer.from(text, 'utf8');
    const ids: string[] = [];
    const parser = new BatchInputParser(DEFAULT_BATCH_LIMITS, (l) => ids.push(l.custom_id));
    // Three bytes at a time cuts through the emoji's four-byte sequence.
    for (let i = 0; i < bytes.length; i += 3) parser.push(bytes.subarray(i, i + 3));
    expect(parser.end()).toBe(3);
    expect(ids).toEqual(['é-1', '😀-2', 'plain']);
  });

  it('refuses a bad line as soon as its newline arrives', () => {
    const parser = new BatchInputParser(DEFAULT_BATCH_LIMITS);
    parser.push(Buffer.from(`${line('a')}\n{oops`));
    expect(() => parser.push(Buffer.from('\n'))).toThrow(/line 2: not valid JSON/);
  });
});
