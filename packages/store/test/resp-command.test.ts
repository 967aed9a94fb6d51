import { redisUrl, uniquePrefix } from '@fairway/testkit';
import { Command, Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeResp, RespCommand } from '../src/resp-command.ts';

/** Arguments that cross every branch: empty, ASCII below and above 64 chars, multi-byte, astral, a lone surrogate, lengths at each digit boundary. */
const ARGS: string[] = [
  '',
  'a',
  'fairway:{p}:req:0123456789abcdef',
  '12345',
  'é',
  'ünïcödé tenant',
  '日本語のプロンプト',
  '🙂 emoji',
  '\ud800 lone surrogate',
  'x'.repeat(9),
  'x'.repeat(10),
  'x'.repeat(63),
  'y'.repeat(64),
  'z'.repeat(99),
  'z'.repeat(100),
  `${'é'.repeat(40)}${'a'.repeat(40)}`,
  JSON.stringify({ id: 'r1', payload: { messages: [{ role: 'user', content: 'héllo\n"quoted"' }] } }),
  'w'.repeat(5000),
];

describe('RespCommand: one buffer per command', () => {
  it("encodes exactly the bytes ioredis's own Command writes, for every kind of argument", () => {
    const ours = encodeResp('fcall', ARGS);
    const theirs = new Command('fcall', ARGS).toWritable(undefined as never);
    expect(ours.equals(Buffer.from(theirs as string, 'utf8'))).toBe(true);
    // And one argument at a time, so a mismatch names its argument.
    for (const a of ARGS)
      expect(encodeResp('echo', [a]).toString('hex'), JSON.stringify(a)).toBe(
        Buffer.from(new Command('echo', [a]).toWritable(undefined as never) as string, 'utf8').toString(
          'hex',
        ),
      );
    expect(encodeResp('ping', []).toString()).toBe('*1\r\n$4\r\nping\r\n');
  });

  describe('against Redis', () => {
    let redis: Redis;
    const prefix = uniquePrefix('resp');
    beforeAll(() => {
      redis = new Redis(redisUrl());
    });
    afterAll(async () => {
      const keys = await redis.keys(`${prefix}:*`);
      if (keys.length > 0) await redis.del(...keys);
      redis.disconnect();
    });

    it('stores and returns every argument unchanged (multi-byte text included)', async () => {
      for (const [i, a] of ARGS.entries()) {
        const key = `${prefix}:${i}`;
        await redis.sendCommand(new RespCommand('set', [key, a]));
        // A lone surrogate has no UTF-8 form: both encoders write U+FFFD for it.
        expect(await redis.get(key)).toBe(a.replace('\ud800', '\ufffd'));
      }
    });
  });
});
