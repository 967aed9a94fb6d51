import type { TokenCounter } from '@fairway/core';
import type { ChatRequest, CompletionRequest } from './request-schema.ts';

/**
 * How the simulated engine counts a prompt, the way vLLM does: render the conversation with the
 * model's chat template (Llama-2's `[INST]` format here), the `tools` as vLLM's JSON tool templates
 * show them (each `tojson(indent=4)` under an instruction, in the first user turn), then tokenize
 * the text; images, audio and video add the encoder's tokens. It is deliberately not the gateway's
 * estimate (characters over 4 per field), so comparing the two measures that estimate.
 */

/** Encoder tokens per media part the simulated model reports (LLaVA-1.5 at 336 px: 576 per image). */
export const SIM_MEDIA_TOKENS: ReadonlyMap<string, number> = new Map([
  ['image_url', 576],
  ['input_image', 576],
  ['image_embeds', 576],
  ['input_audio', 750],
  ['audio_url', 750],
  ['video_url', 2304],
]);

/** Special tokens (`<s>`, `</s>`) the template adds, not tokenized from text. */
const BOS_EOS = 2;
/** The `<s>` the tokenizer adds to a prompt with `add_special_tokens`. */
const BOS = 1;

const TOOL_PREAMBLE =
  'You have access to the functions below. To call one, answer with JSON of the form ' +
  '{"name": function name, "parameters": an object of argument names and values}.\n\n';

/**
 * Calls `piece(start, end)` for each token of `text` under the word-piece stand-in of
 * {@link wordPieceCounter}: a letter run is one token per eight letters, every digit, punctuation
 * mark and newline is one, a run of spaces one per eight, and the one space before a word belongs
 * to the word's first token.
 */
function scanWordPieces(text: string, piece: (start: number, end: number) => void): void {
  let i = 0;
  const len = text.length;
  while (i < len) {
    const c = text.charCodeAt(i);
    if (isLetter(c)) {
      let j = i + 1;
      while (j < len && isLetter(text.charCodeAt(j))) j++;
      for (let k = i; k < j; k += 8) piece(k, Math.min(j, k + 8));
      i = j;
    } else if (c === 0x20) {
      let j = i + 1;
      while (j < len && text.charCodeAt(j) === 0x20) j++;
      // One space before a word is part of the word's token.
      const beforeWord = j < len && isLetter(text.charCodeAt(j));
      const end = beforeWord ? j - 1 : j;
      for (let k = i; k < end; k += 8) piece(k, Math.min(end, k + 8));
      if (beforeWord) {
        let w = j + 1;
        while (w < len && w < j + 8 && isLetter(text.charCodeAt(w))) w++;
        piece(end, w);
        let r = w;
        while (r < len && isLetter(text.charCodeAt(r))) r++;
        for (let k = w; k < r; k += 8) piece(k, Math.min(r, k + 8));
        j = r;
      }
      i = j;
    } else {
      piece(i, i + 1);
      i++;
    }
  }
}

/**
 * A tokenizer stand-in when no `tokenizer.json` is configured, shaped after SentencePiece/BPE
 * vocabularies such as Llama's: a letter run is one token per eight letters (common words are one
 * token), every digit, punctuation mark and newline is one, a run of spaces one per eight (the
 * space before a word belongs to the word). Fitted to Llama-2's tokenizer: within 10% of it on
 * this repository's prose, TypeScript, and compact and indented JSON.
 */
export const wordPieceCounter: TokenCounter = {
  count(text: string): number {
    let n = 0;
    scanWordPieces(text, () => {
      n++;
    });
    return n;
  },
};

/** The tokens of `text` under the word-piece stand-in, as strings (what prefix caching hashes). */
export function wordPieces(text: string): string[] {
  const out: string[] = [];
  scanWordPieces(text, (start, end) => out.push(text.slice(start, end)));
  return out;
}

function isLetter(c: number): boolean {
  return (c >= 0x61 && c <= 0x7a) || (c >= 0x41 && c <= 0x5a) || c >= 0xc0;
}

type Message = ChatRequest['messages'][number];

/** A message's text: the string, or its text parts joined by newlines (vLLM's "string" format). */
function textOf(m: Message): string {
  const c = m.content;
  if (typeof c === 'string') return c;
  if (!Array.isArray(c)) return '';
  const texts: string[] = [];
  for (const p of c) if (typeof p.text === 'string') texts.push(p.text);
  return texts.join('\n');
}

function mediaTokens(m: Message): number {
  if (!Array.isArray(m.content)) return 0;
  let n = 0;
  for (const p of m.content) n += SIM_MEDIA_TOKENS.get(p.type) ?? 0;
  return n;
}

function toolCallText(m: Record<string, unknown>): string {
  const calls = Array.isArray(m.tool_calls) ? m.tool_calls : [];
  const out: string[] = [];
  for (const c of calls) {
    const fn = (c as { function?: { name?: unknown; arguments?: unknown } }).function;
    if (fn === undefined) continue;
    const args = typeof fn.arguments === 'string' ? fn.arguments : JSON.stringify(fn.arguments ?? {});
    out.push(`{"name": ${JSON.stringify(fn.name ?? '')}, "parameters": ${args}}`);
  }
  return out.join('\n');
}

/**
 * The prompt text of a chat request under the simulated model's template, and the special and
 * media tokens that are not text.
 */
export function renderSimChat(req: ChatRequest): { text: string; extraTokens: number } {
  const tools = Array.isArray(req.tools) ? (req.tools as unknown[]) : [];
  const toolsText =
    tools.length === 0
      ? ''
      : `${TOOL_PREAMBLE}${tools.map((t) => JSON.stringify(t, null, 4)).join('\n\n')}\n\n`;
  let system = '';
  const turns: string[] = [];
  let extra = 0;
  let toolsPlaced = toolsText === '';
  let user = '';
  for (const m of req.messages) {
    extra += mediaTokens(m);
    const text = textOf(m);
    if (m.role === 'system' || m.role === 'developer') {
      system += system === '' ? text : `\n${text}`;
    } else if (m.role === 'user' || m.role === 'tool' || m.role === 'function') {
      const body = m.role === 'user' ? text : `Function result: ${text}`;
      const withTools = toolsPlaced ? body : `${toolsText}${body}`;
      toolsPlaced = true;
      user += user === '' ? withTools : `\n${withTools}`;
    } else {
      const calls = toolCallText(m as Record<string, unknown>);
      const answer = calls === '' ? text : text === '' ? calls : `${text}\n${calls}`;
      turns.push(`[INST] ${sysBlock(system, turns.length)}${user.trim()} [/INST] ${answer.trim()} `);
      extra += BOS_EOS;
      user = '';
    }
  }
  if (!toolsPlaced) user = `${toolsText}${user}`;
  turns.push(`[INST] ${sysBlock(system, turns.length)}${user.trim()} [/INST]`);
  extra += 1; // the last turn's <s>
  return { text: turns.join(''), extraTokens: extra };
}

function sysBlock(system: string, turn: number): string {
  return turn === 0 && system !== '' ? `<<SYS>>\n${system}\n<</SYS>>\n\n` : '';
}

/**
 * Prompt tokens of a chat request, counted as the simulated model's tokenizer and template would
 * (`add_special_tokens` adds the tokenizer's `<s>` to the template's).
 */
export function chatPromptTokens(req: ChatRequest, counter: TokenCounter): number {
  const { text, extraTokens } = renderSimChat(req);
  return Math.max(1, counter.count(text) + extraTokens + (req.add_special_tokens === true ? BOS : 0));
}

/**
 * Prompt tokens of a completion request: the token ids given, or the text's tokens plus `<s>`
 * (unless `add_special_tokens` is false).
 */
export function completionPromptTokens(req: CompletionRequest, counter: TokenCounter): number {
  const p = req.prompt;
  const bos = req.add_special_tokens === false ? 0 : BOS;
  if (typeof p === 'string') return counter.count(p) + bos;
  const first = p[0];
  if (typeof first === 'string') return counter.count(first) + bos;
  if (Array.isArray(first)) return first.length;
  return p.length;
}
