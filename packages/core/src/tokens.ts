/**
 * Deterministic prompt-size estimate used before a tokenizer has run: about four characters per
 * token, plus a few tokens of chat-template overhead per message. The gateway uses it to reserve
 * capacity and check limits; the engine's `usage` settles the true count afterwards.
 */
export const CHARS_PER_TOKEN = 4;

/** Template tokens added per chat message (role markers). */
export const TOKENS_PER_MESSAGE = 4;

/** Estimated tokens of a piece of text (at least 1 for non-empty text). */
export function estimateTextTokens(text: string): number {
  return text.length === 0 ? 0 : Math.ceil(text.length / CHARS_PER_TOKEN);
}

/** Estimated prompt tokens of a chat conversation whose message contents are given as text. */
export function estimateChatTokens(contents: readonly string[]): number {
  let n = 0;
  for (const c of contents) n += estimateTextTokens(c) + TOKENS_PER_MESSAGE;
  return n;
}
