import { ConfigError, ErrorCode, type FairwayConfig } from '@fairway/core';
import { loadTokenizer, TokenizerLoadError } from '@fairway/engine';
import type { PoolTokenizer } from './request-descriptor.ts';

/**
 * Loads the tokenizer of every pool that configures one (`pools[].tokenizer`), by pool id. An
 * unreadable or invalid `tokenizer.json` is a `ConfigError` naming the pool, raised at start-up.
 */
export function loadPoolTokenizers(config: FairwayConfig): ReadonlyMap<string, PoolTokenizer> {
  const out = new Map<string, PoolTokenizer>();
  config.pools.forEach((pool, i) => {
    if (pool.tokenizer === undefined) return;
    try {
      out.set(pool.id, {
        counter: loadTokenizer(pool.tokenizer.path),
        maxTokens: pool.tokenizer.maxPromptTokens,
      });
    } catch (err) {
      if (!(err instanceof TokenizerLoadError)) throw err;
      throw new ConfigError(ErrorCode.CONFIG_INVALID, 'fairway config', [
        { path: `pools.${i}.tokenizer.path`, message: err.message },
      ]);
    }
  });
  return out;
}
