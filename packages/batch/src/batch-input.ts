import { ApiError } from '@fairway/dispatcher';
import { BATCH_ENDPOINTS, type BatchEndpoint, type BatchLimits } from './batch-limits.ts';

/** One request line of a batch input file. */
export interface BatchRequestLine {
  readonly custom_id: string;
  readonly method: 'POST';
  readonly url: BatchEndpoint;
  readonly body: Record<string, unknown>;
}

const ENDPOINTS: ReadonlySet<string> = new Set(BATCH_ENDPOINTS);

/** A batch input file refused: the first bad line (1-based), or none for the file as a whole. */
export class BatchInputError extends ApiError {
  readonly line: number | null;

  constructor(line: number | null, message: string) {
    super('INVALID_REQUEST', line === null ? message : `line ${line}: ${message}`, { param: 'file' });
    this.line = line;
  }
}

function invalid(line: number, message: string): BatchInputError {
  return new BatchInputError(line, message);
}

/**
 * Checks a batch input file (JSONL, one request per line; blank lines are skipped) as its bytes
 * arrive: each line a JSON object with a unique `custom_id`, `method` POST, `url` one of
 * {@link BATCH_ENDPOINTS} and a JSON object `body` naming a `model`. The first bad line is
 * refused with its line number (the body itself is validated by the route when the line runs).
 * Only the line being read and the `custom_id`s seen are held, so a file need not fit in memory.
 */
export class BatchInputParser {
  readonly #limits: BatchLimits;
  readonly #onLine: ((line: BatchRequestLine) => void) | undefined;
  readonly #seen = new Set<string>();
  /** Bytes of the line not yet ended by a newline. */
  #partial: Buffer[] = [];
  #lineNo = 0;
  #count = 0;

  /** @param onLine called with each good line, in order */
  constructor(limits: BatchLimits, onLine?: (line: BatchRequestLine) => void) {
    this.#limits = limits;
    this.#onLine = onLine;
  }

  /** Request lines read so far. */
  get count(): number {
    return this.#count;
  }

  /** Reads the next bytes of the file; throws {@link BatchInputError} at the first bad line. */
  push(chunk: Buffer): void {
    let from = 0;
    // A newline byte never occurs inside a UTF-8 sequence, so lines split on bytes decode whole.
    for (let nl = chunk.indexOf(10, from); nl >= 0; nl = chunk.indexOf(10, from)) {
      this.#partial.push(chunk.subarray(from, nl));
      this.#line(Buffer.concat(this.#partial).toString('utf8'));
      this.#partial = [];
      from = nl + 1;
    }
    if (from < chunk.length) this.#partial.push(chunk.subarray(from));
  }

  /** Ends the file: checks its last line and that it holds any; returns the request lines read. */
  end(): number {
    if (this.#partial.length > 0) this.#line(Buffer.concat(this.#partial).toString('utf8'));
    this.#partial = [];
    if (this.#count === 0) throw new BatchInputError(null, 'the file holds no request lines');
    return this.#count;
  }

  #line(text: string): void {
    const n = ++this.#lineNo;
    const src = text.trim();
    if (src === '') return;
    const limits = this.#limits;
    if (this.#count >= limits.maxLines)
      throw new BatchInputError(null, `a batch file holds at most ${limits.maxLines} requests`);
    let value: unknown;
    try {
      value = JSON.parse(src);
    } catch (err) {
      throw invalid(n, `not valid JSON (${(err as Error).message})`);
    }
    if (typeof value !== 'object' || value === null || Array.isArray(value))
      throw invalid(n, 'must be a JSON object with custom_id, method, url and body');
    const v = value as Record<string, unknown>;
    const id = v.custom_id;
    if (typeof id !== 'string' || id.length === 0) throw invalid(n, 'custom_id must be a non-empty string');
    if (id.length > limits.maxCustomIdLength)
      throw invalid(n, `custom_id must be at most ${limits.maxCustomIdLength} characters`);
    if (this.#seen.has(id)) throw invalid(n, `duplicate custom_id "${id}": each line needs its own`);
    this.#seen.add(id);
    if (v.method !== 'POST') throw invalid(n, 'method must be "POST"');
    if (typeof v.url !== 'string' || !ENDPOINTS.has(v.url))
      throw invalid(n, `url must be one of ${BATCH_ENDPOINTS.join(', ')}`);
    const body = v.body;
    if (typeof body !== 'object' || body === null || Array.isArray(body))
      throw invalid(n, 'body must be a JSON object');
    const b = body as Record<string, unknown>;
    if (typeof b.model !== 'string' || b.model === '')
      throw invalid(n, 'body.model must be a non-empty string');
    if (b.stream === true) throw invalid(n, 'body.stream is not supported in a batch');
    this.#count++;
    this.#onLine?.({ custom_id: id, method: 'POST', url: v.url as BatchEndpoint, body: b });
  }
}

/** Parses and checks a whole batch input file held in memory (see {@link BatchInputParser}). */
export function parseBatchInput(text: string, limits: BatchLimits): BatchRequestLine[] {
  const lines: BatchRequestLine[] = [];
  const parser = new BatchInputParser(limits, (l) => lines.push(l));
  parser.push(Buffer.from(text, 'utf8'));
  parser.end();
  return lines;
}
