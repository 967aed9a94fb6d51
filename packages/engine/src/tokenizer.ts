import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import type { TokenCounter } from '@fairway/core';
import { Tokenizer } from '@huggingface/tokenizers';
import { TokenizerLoadError } from './errors.ts';

/** A model's tokenizer loaded from its Hugging Face `tokenizer.json`, counting tokens of text. */
export interface LoadedTokenizer extends TokenCounter {
  /** Absolute path of the `tokenizer.json` it was loaded from. */
  readonly path: string;
  /** The token ids of `text`, without special tokens (what `count` counts). */
  encode(text: string): number[];
}

function readJson(path: string): unknown {
  return JSON.parse(readFileSync(path, 'utf8'));
}

/**
 * Loads a model's tokenizer from a local `tokenizer.json` (and the `tokenizer_config.json` beside
 * it, when present) with Tokenizers.js (`@huggingface/tokenizers`, pure JavaScript): nothing is
 * downloaded. `count` encodes without special tokens (the chat template adds its own). Throws a
 * {@link TokenizerLoadError} naming the file.
 */
export function loadTokenizer(path: string): LoadedTokenizer {
  const file = resolve(path);
  let tokenizer: Tokenizer;
  try {
    const json = readJson(file);
    let config: unknown = {};
    try {
      config = readJson(join(dirname(file), 'tokenizer_config.json'));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
    tokenizer = new Tokenizer(json as object, config as object);
  } catch (err) {
    throw new TokenizerLoadError(file, (err as Error).message, { cause: err });
  }
  const encode = (text: string): number[] =>
    text.length === 0 ? [] : tokenizer.encode(text, { add_special_tokens: false }).ids;
  return { path: file, count: (text) => encode(text).length, encode };
}
