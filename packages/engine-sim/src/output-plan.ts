import { createHash } from 'node:crypto';
import { syntheticText, tokenText } from './response-format.ts';

/**
 * What a generation says, decided before it runs, as a real model's sampling parameters shape it:
 * a tool call when the request offers tools (and does not say `tool_choice: "none"`), JSON valid
 * for the requested `response_format`, or the synthetic filler text cut at the first `stop`
 * string. The engine model still decides timing; this decides the tokens' text, how many there are
 * (structured output has its own length) and `finish_reason`.
 */
export interface OutputPlan {
  /** Text of output token `i` (0-based, JSON-escaped for a string literal). */
  piece(i: number): string;
  /** Text of output token `i`, not escaped. */
  raw(i: number): string;
  /** The text of the first `count` tokens (not escaped). */
  text(count: number): string;
  /** Tokens the answer has when the model ends it itself; undefined: the natural length decides. */
  readonly length: number | undefined;
  /** `finish_reason` when it ends itself: `stop`, or `tool_calls` for a tool call. */
  readonly finishReason: 'stop' | 'tool_calls';
  /** The stop string that ended it (vLLM's `stop_reason`). */
  readonly stopReason?: string;
  /** The tool called: the answer's tokens are its arguments. */
  readonly toolCall?: { readonly id: string; readonly name: string };
  /** Alternatives per token with logprobs (`top_logprobs`, or `logprobs` of completions); undefined: none asked. */
  readonly topLogprobs?: number;
}

/** Characters of structured output per token. */
const CHARS_PER_PIECE = 4;

const jsonEscape = (s: string): string => JSON.stringify(s).slice(1, -1);

interface PlanRequest {
  readonly kind: 'chat' | 'completions';
  readonly body: Record<string, unknown>;
  /** Index of the first filler token (a continuation's). */
  readonly firstToken: number;
  /** Tokens the answer would have without a stop string (natural length, within max_tokens). */
  readonly outputTokens: number;
  /** The request's id, from which the tool call's id is made. */
  readonly id: string;
}

/** The plan of a request (see {@link OutputPlan}); undefined for plain filler text without extras. */
export function planOutput(r: PlanRequest): OutputPlan | undefined {
  const b = r.body;
  const top = logprobsAsked(r.kind, b);
  const tool = r.kind === 'chat' ? chosenTool(b) : undefined;
  if (tool !== undefined) {
    const args = JSON.stringify(sampleOf(tool.parameters ?? { type: 'object' }, 0));
    return structured(args, 'tool_calls', top, {
      id: `chatcmpl-tool-${createHash('sha256').update(r.id).digest('hex').slice(0, 24)}`,
      name: tool.name,
    });
  }
  const schema = jsonSchemaOf(b.response_format);
  if (schema !== undefined) return structured(JSON.stringify(sampleOf(schema, 0)), 'stop', top, undefined);
  const stops = stopStrings(b.stop);
  if (stops.length === 0 && top === undefined) return undefined;
  // The filler text up to the planned length, cut before the first stop string in it.
  const full = syntheticText(r.outputTokens, r.firstToken);
  let cut = full.length;
  let reason: string | undefined;
  for (const s of stops) {
    const at = full.indexOf(s);
    if (at >= 0 && at < cut) {
      cut = at;
      reason = s;
    }
  }
  // Tokens up to the one that completed the stop string; their text ends where the stop began.
  let length: number | undefined;
  if (reason !== undefined) {
    let end = 0;
    length = 0;
    while (end < cut + reason.length) end += tokenText(r.firstToken + length++).length;
  }
  const starts: number[] = [];
  let pos = 0;
  for (let i = 0; i < (length ?? r.outputTokens); i++) {
    starts.push(pos);
    pos += tokenText(r.firstToken + i).length;
  }
  const slice = (i: number): string => {
    const from = starts[i] ?? pos;
    const to = Math.min(cut, from + tokenText(r.firstToken + i).length);
    return to > from ? full.slice(from, to) : '';
  };
  return {
    piece: (i) => slice(i),
    raw: (i) => slice(i),
    text: (count) => full.slice(0, Math.min(cut, starts[count] ?? Math.min(cut, pos))),
    length,
    finishReason: 'stop',
    ...(reason !== undefined ? { stopReason: reason } : {}),
    ...(top !== undefined ? { topLogprobs: top } : {}),
  };
}

function structured(
  text: string,
  finishReason: 'stop' | 'tool_calls',
  top: number | undefined,
  toolCall: OutputPlan['toolCall'],
): OutputPlan {
  const pieces: string[] = [];
  for (let i = 0; i < text.length; i += CHARS_PER_PIECE) pieces.push(text.slice(i, i + CHARS_PER_PIECE));
  return {
    piece: (i) => jsonEscape(pieces[i] ?? ''),
    raw: (i) => pieces[i] ?? '',
    text: (count) => pieces.slice(0, count).join(''),
    length: Math.max(1, pieces.length),
    finishReason,
    ...(toolCall !== undefined ? { toolCall } : {}),
    ...(top !== undefined ? { topLogprobs: top } : {}),
  };
}

/** Alternatives per token the request asks logprobs for: chat `logprobs` + `top_logprobs`, completions `logprobs: k`. */
function logprobsAsked(kind: 'chat' | 'completions', b: Record<string, unknown>): number | undefined {
  if (kind === 'chat') {
    if (b.logprobs !== true) return undefined;
    return typeof b.top_logprobs === 'number' ? b.top_logprobs : 0;
  }
  return typeof b.logprobs === 'number' ? b.logprobs : undefined;
}

interface ToolDef {
  readonly name: string;
  readonly parameters?: unknown;
}

/** The function a chat request's tools and `tool_choice` make the model call, if any. */
function chosenTool(b: Record<string, unknown>): ToolDef | undefined {
  if (!Array.isArray(b.tools) || b.tools.length === 0) return undefined;
  const choice = b.tool_choice;
  if (choice === 'none') return undefined;
  const fns: ToolDef[] = [];
  for (const t of b.tools) {
    const f = (t as { function?: { name?: unknown; parameters?: unknown } }).function;
    if (f !== undefined && typeof f.name === 'string') fns.push({ name: f.name, parameters: f.parameters });
  }
  if (typeof choice === 'object' && choice !== null) {
    const name = (choice as { function?: { name?: unknown } }).function?.name;
    return fns.find((f) => f.name === name) ?? fns[0];
  }
  return fns[0];
}

/** The schema a `response_format` asks the answer to follow; `{}` (any JSON object) for `json_object`. */
function jsonSchemaOf(format: unknown): unknown {
  if (typeof format !== 'object' || format === null) return undefined;
  const f = format as { type?: unknown; json_schema?: { schema?: unknown } };
  if (f.type === 'json_object') return { type: 'object' };
  if (f.type === 'json_schema') return f.json_schema?.schema ?? { type: 'object' };
  return undefined;
}

/** A value valid for a JSON schema (the common keywords: type, properties, items, enum, const, anyOf, …). */
export function sampleOf(schema: unknown, depth: number): unknown {
  if (typeof schema !== 'object' || schema === null || depth > 8) return null;
  const s = schema as Record<string, unknown>;
  if ('const' in s) return s.const;
  if (Array.isArray(s.enum) && s.enum.length > 0) return s.enum[0];
  for (const k of ['anyOf', 'oneOf', 'allOf'])
    if (Array.isArray(s[k]) && (s[k] as unknown[]).length > 0)
      return sampleOf((s[k] as unknown[])[0], depth + 1);
  const type = Array.isArray(s.type) ? s.type.find((t) => t !== 'null') : s.type;
  switch (type) {
    case 'object': {
      const out: Record<string, unknown> = {};
      const props = (s.properties ?? {}) as Record<string, unknown>;
      for (const [k, v] of Object.entries(props)) out[k] = sampleOf(v, depth + 1);
      return out;
    }
    case 'array': {
      const n = Math.max(1, typeof s.minItems === 'number' ? s.minItems : 1);
      const max = typeof s.maxItems === 'number' ? s.maxItems : n;
      return Array.from({ length: Math.min(n, max) }, () => sampleOf(s.items ?? {}, depth + 1));
    }
    case 'string': {
      const min = typeof s.minLength === 'number' ? s.minLength : 0;
      return 'sample'.padEnd(min, 'x');
    }
    case 'integer':
      return typeof s.minimum === 'number' ? Math.ceil(s.minimum) : 1;
    case 'number':
      return typeof s.minimum === 'number' ? s.minimum : 0.5;
    case 'boolean':
      return true;
    case 'null':
      return null;
    default:
      return s.properties !== undefined ? sampleOf({ ...s, type: 'object' }, depth) : null;
  }
}

/** The stop strings of a request (`stop`: a string or a list). */
function stopStrings(stop: unknown): string[] {
  if (typeof stop === 'string') return stop.length > 0 ? [stop] : [];
  if (Array.isArray(stop)) return stop.filter((s): s is string => typeof s === 'string' && s.length > 0);
  return [];
}

/** A deterministic log probability of token `i`'s `rank`-th alternative (rank 0: the token sampled). */
export function logprobOf(i: number, rank: number): number {
  return -(0.05 + ((i * 7919) % 997) / 1000 + rank * 0.75);
}

/** Chat `logprobs.content` entries of tokens `from`..`to` (exclusive) of a plan. */
export function chatLogprobs(plan: OutputPlan, from: number, to: number): string {
  const raw = (i: number): string => plan.raw(i);
  const top = plan.topLogprobs ?? 0;
  const entries: string[] = [];
  for (let i = from; i < to; i++) {
    const token = raw(i);
    const alts: string[] = [];
    for (let r = 0; r < top; r++) {
      const t = r === 0 ? token : tokenText(i + r * 7);
      alts.push(
        `{"token":${JSON.stringify(t)},"logprob":${logprobOf(i, r)},"bytes":[${[...Buffer.from(t)].join(',')}]}`,
      );
    }
    entries.push(
      `{"token":${JSON.stringify(token)},"logprob":${logprobOf(i, 0)},"bytes":[${[...Buffer.from(token)].join(',')}],"top_logprobs":[${alts.join(',')}]}`,
    );
  }
  return `{"content":[${entries.join(',')}]}`;
}

/** Completions `logprobs` of tokens `from`..`to` (exclusive), text offsets from `offset`. */
export function completionLogprobs(plan: OutputPlan, from: number, to: number, offset: number): string {
  const raw = (i: number): string => plan.raw(i);
  const top = plan.topLogprobs ?? 0;
  const tokens: string[] = [];
  const lps: number[] = [];
  const tops: string[] = [];
  const offsets: number[] = [];
  let at = offset;
  for (let i = from; i < to; i++) {
    const token = raw(i);
    tokens.push(JSON.stringify(token));
    lps.push(logprobOf(i, 0));
    const alts: string[] = [];
    for (let r = 0; r < top; r++)
      alts.push(`${JSON.stringify(r === 0 ? token : tokenText(i + r * 7))}:${logprobOf(i, r)}`);
    tops.push(`{${alts.join(',')}}`);
    offsets.push(at);
    at += token.length;
  }
  return `{"tokens":[${tokens.join(',')}],"token_logprobs":[${lps.join(',')}],"top_logprobs":[${tops.join(',')}],"text_offset":[${offsets.join(',')}]}`;
}
