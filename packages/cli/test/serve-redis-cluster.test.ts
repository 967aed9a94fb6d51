import { describe, expect, it } from 'vitest';
import { fairway } from './support/run-cli.ts';

describe('fairway serve --redis-cluster', () => {
  it('refuses seed nodes that are not host:port,host:port, naming the flag', async () => {
    const r = await fairway('serve', '--redis-cluster', 'redis-0,redis-1:6379');
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('--redis-cluster: must be host:port,host:port (got "redis-0,redis-1:6379")');
  });
});
