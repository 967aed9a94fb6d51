const LF = 0x0a;
const CR = 0x0d;
const SPACE = 0x20;
const OPEN_BRACE = 0x7b;
const USAGE_KEY = Buffer.from('"usage":');
const EMPTY_CHOICES = Buffer.from('"choices":[]');
const DATA = Buffer.from('data:');

/**
 * Removes the usage-only SSE event (`choices: []` plus `usage`) that the gateway asked the engine
 * for when the client did not (DESIGN.md request path, step 5), without parsing or re-serialising
 * any other event. Bytes are forwarded up to the last complete line of what has arrived — an SSE
 * client cannot act on a partial line anyway, so this adds no latency — and only a line that holds
 * both `"usage":{` and `"choices":[]` (vLLM's final usage chunk) is cut, with its blank separator.
 * A literal `"usage":` cannot occur inside generated text, where quotes are escaped.
 *
 * With `cutUsage` false nothing is cut: the filter only holds a partial last line back, so that
 * what was forwarded when the engine call is cut short (an eviction that resumes elsewhere) ends
 * with a whole line.
 */
export class UsageChunkFilter {
  readonly #cutUsage: boolean;
  #carry: Buffer | undefined;
  /** A usage line was cut at the end of the last block; its blank separator comes next. */
  #skipBlank = false;
  /** Usage-only events removed so far. */
  dropped = 0;

  constructor(cutUsage = true) {
    this.#cutUsage = cutUsage;
  }

  /** Takes the next bytes from the engine; returns what to forward now (possibly nothing). */
  push(chunk: Uint8Array): Buffer | undefined {
    const buf = Buffer.isBuffer(chunk)
      ? chunk
      : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    const data = this.#carry === undefined ? buf : Buffer.concat([this.#carry, buf]);
    const last = data.lastIndexOf(LF);
    if (last < 0) {
      this.#carry = data;
      return undefined;
    }
    this.#carry = last + 1 < data.length ? Buffer.from(data.subarray(last + 1)) : undefined;
    let block = data.subarray(0, last + 1);
    if (!this.#cutUsage) return block;
    if (this.#skipBlank) {
      this.#skipBlank = false;
      const skip = block[0] === LF ? 1 : block[0] === CR && block[1] === LF ? 2 : 0;
      block = block.subarray(skip);
    }
    return this.#cut(block);
  }

  /** The bytes still held at the end of the stream (an unterminated last line), if any. */
  end(): Buffer | undefined {
    const rest = this.#carry;
    this.#carry = undefined;
    return rest;
  }

  #cut(block: Buffer): Buffer {
    let from = 0;
    for (;;) {
      const at = block.indexOf(USAGE_KEY, from);
      if (at < 0) return block;
      let v = at + USAGE_KEY.length;
      while (block[v] === SPACE) v++;
      const lineStart = block.lastIndexOf(LF, at) + 1;
      const lineEnd = block.indexOf(LF, at);
      from = lineEnd + 1;
      if (block[v] !== OPEN_BRACE) continue;
      const line = block.subarray(lineStart, lineEnd);
      if (line.indexOf(DATA) !== 0 || line.indexOf(EMPTY_CHOICES) < 0) continue;
      // Drop the line and the blank line that ends its event, if it has arrived.
      let end = lineEnd + 1;
      if (end === block.length) this.#skipBlank = true;
      if (block[end] === CR) end++;
      if (block[end] === LF) end++;
      this.dropped++;
      return Buffer.concat([block.subarray(0, lineStart), this.#cut(block.subarray(end))]);
    }
  }
}
