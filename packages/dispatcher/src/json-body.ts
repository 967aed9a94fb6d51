import { isUtf8 } from 'node:buffer';
import type { FastifyInstance } from 'fastify';
import { ApiError } from './errors.ts';

/**
 * Deepest nesting of arrays and objects a request body may have. OpenAI bodies nest a few levels
 * (messages → content parts, tool JSON schemas a dozen or so); a deeper body is an attack on the
 * parser or on whoever serialises it next (the engine client), not a request.
 */
export const MAX_JSON_DEPTH = 64;

/**
 * Whether JSON text nests arrays and objects deeper than `max` (brackets inside strings do not
 * count). One pass over the bytes, before anything parses them.
 */
export function nestsDeeperThan(bytes: Uint8Array, max: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < bytes.length; i++) {
    const c = bytes[i];
    if (inString) {
      if (c === 0x5c)
        i++; // backslash: skip the escaped byte
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x7b || c === 0x5b) {
      if (++depth > max) return true;
    } else if (c === 0x7d || c === 0x5d) depth--;
  }
  return false;
}

/**
 * Replaces fastify's JSON body parser with one that first refuses bodies that are not UTF-8
 * (RFC 8259 §8.1: replacing the bad bytes would forward text the client never sent) or nest
 * deeper than {@link MAX_JSON_DEPTH}, each a 400 `invalid_json`; then parses with fastify's own
 * parser (prototype-poisoning keys are errors), so its empty-body and syntax errors stay as they were.
 */
export function useStrictJsonBodies(app: FastifyInstance): void {
  const parse = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => {
    const bytes = body as Buffer;
    if (!isUtf8(bytes)) {
      done(new ApiError('INVALID_JSON', 'request body is not valid UTF-8'), undefined);
      return;
    }
    if (nestsDeeperThan(bytes, MAX_JSON_DEPTH)) {
      done(
        new ApiError('INVALID_JSON', `request body nests deeper than ${MAX_JSON_DEPTH} levels`),
        undefined,
      );
      return;
    }
    // fastify's default parser is synchronous: it calls `done` before returning.
    void parse(request, bytes.toString('utf8'), done);
  });
}
