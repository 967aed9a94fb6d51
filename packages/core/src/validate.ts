import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import type { z } from 'zod';
import { ConfigError, ErrorCode } from './errors.ts';

/** Formats a zod issue path as `tenants[2].limits.rpm`. */
export function formatPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const p of path) {
    if (typeof p === 'number') out += `[${p}]`;
    else out += out ? `.${String(p)}` : String(p);
  }
  return out;
}

/**
 * Validates `data` against `schema`; on failure throws a {@link ConfigError} whose message names
 * every offending field by its path.
 */
export function parseWith<S extends z.ZodType>(
  schema: S,
  data: unknown,
  source?: string,
  code: ErrorCode = ErrorCode.CONFIG_INVALID,
): z.infer<S> {
  const result = schema.safeParse(data);
  if (result.success) return result.data;
  throw new ConfigError(
    code,
    source,
    result.error.issues.map((i) => ({ path: formatPath(i.path), message: i.message })),
  );
}

/** Reads a YAML or JSON file (YAML is a superset of JSON) into plain data. */
export function readStructuredFile(path: string): unknown {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (cause) {
    throw new ConfigError(
      ErrorCode.CONFIG_UNREADABLE,
      path,
      [{ path: '', message: `cannot read file: ${(cause as Error).message}` }],
      {
        cause,
      },
    );
  }
  try {
    return parseYaml(text, { prettyErrors: true });
  } catch (cause) {
    throw new ConfigError(
      ErrorCode.CONFIG_UNREADABLE,
      path,
      [{ path: '', message: `not valid YAML or JSON: ${(cause as Error).message}` }],
      {
        cause,
      },
    );
  }
}
