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
 * Parses and checks a batch input file (JSONL, one request per line; blank lines are skipped):
 * each line a JSON object with a unique `custom_id`, `method` POST, `url` one of
 * {@link BATCH_ENDPOINTS} and a JSON object `body` naming a `model`. The first bad line is
 * refused with its line number (the body itself is validated by the route when the line runs).
 */
export function parseBatchInput(text: string, limits: BatchLimits): BatchRequestLine[] {
  const lines: BatchRequestLine[] = [];
  const seen = new Set<string>();
  const raw = text.split('\n');
  for (let i = 0; i < raw.length; i++) {
    const src = raw[i]?.trim() ?? '';
    if (src === '') continue;
    const n = i + 1;
    if (lines.length >= limits.maxLines)
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
    if (seen.has(id)) throw invalid(n, `duplicate custom_id "${id}": each line needs its own`);
    seen.add(id);
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
    lines.push({ custom_id: id, method: 'POST', url: v.url as BatchEndpoint, body: b });
  }
  if (lines.length === 0) throw new BatchInputError(null, 'the file holds no request lines');
  return lines;
}
