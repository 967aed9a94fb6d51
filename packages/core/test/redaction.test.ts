import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createLogger, redactSecrets } from '../src/index.ts';

describe('redactSecrets', () => {
  it.each([
    ['redis://:hunter2-pw@redis:6379/0', 'redis://:***@redis:6379/0'],
    ['rediss://default:hunter2-pw@redis:6380', 'rediss://default:***@redis:6380'],
    ['nats://fleet:hunter2-pw@nats:4222', 'nats://fleet:***@nats:4222'],
    ['nats://s3cr3t-token@nats:4222', 'nats://***@nats:4222'],
    [
      'cannot reach Redis at redis://u:p%40ss@h:1: WRONGPASS',
      'cannot reach Redis at redis://u:***@h:1: WRONGPASS',
    ],
    ['http://h/x?password=hunter2&db=1', 'http://h/x?password=***&db=1'],
    ['wss://h/?auth_token=abc.def', 'wss://h/?auth_token=***'],
    ['Authorization: Bearer sk-live-abcdef123', 'Authorization: Bearer ***'],
    ['redis://127.0.0.1:6379', 'redis://127.0.0.1:6379'],
    ['plain text with user@example.com', 'plain text with user@example.com'],
  ])('%s', (input, output) => {
    expect(redactSecrets(input)).toBe(output);
  });
});

describe('createLogger', () => {
  it('writes no password, token or key, in fields, nested fields, errors or messages', () => {
    const lines: string[] = [];
    const destination = new Writable({
      write(chunk, _enc, done) {
        lines.push(String(chunk));
        done();
      },
    });
    const log = createLogger({ destination }).child({ component: 'test', token: 'pw-nine-999' });
    log.info(
      {
        url: 'redis://:pw-one-111@r:6379',
        err: new Error('connect to nats://u:pw-two-222@n:4222 failed'),
        headers: { authorization: 'Bearer pw-three-333' },
        token: 'pw-four-444',
        conn: { password: 'pw-five-555', servers: 'nats://t0k3n-666@n' },
        req: { headers: { api_key: 'pw-ten-000' } },
      },
      'starting on redis://:pw-seven-777@r',
    );
    log.warn('raw string with rediss://a:pw-eight-888@h');
    const out = lines.join('');
    expect(out).not.toMatch(/pw-|t0k3n/);
    expect(out).toMatch(/redis:\/\/:\*\*\*@r:6379/);
    expect(out).toMatch(/"component":"test"/);
  });
});
