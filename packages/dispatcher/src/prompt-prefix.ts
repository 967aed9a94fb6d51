import { type PromptPrefix, promptPrefixOfText } from '@fairway/core';
import type { ChatCompletionBody, CompletionBody } from './openai-schemas.ts';
import type { Endpoint, RequestBody } from './request-descriptor.ts';
import { type ResponsesBody, responsesMessages } from './responses-api.ts';

/** What of a message is serialised: its role, content, name and tool calls. */
interface MessageLike {
  readonly role: string;
  readonly content?: unknown;
  readonly name?: unknown;
  readonly tool_calls?: unknown;
  readonly tool_call_id?: unknown;
}

/** The text of a message's content: a string, or its parts' text (other parts as JSON). */
function* contentParts(content: unknown): Generator<string> {
  if (typeof content === 'string') yield content;
  else if (Array.isArray(content))
    for (const part of content) {
      const text = (part as { text?: unknown } | null)?.text;
      yield typeof text === 'string' ? text : JSON.stringify(part);
    }
  else if (content !== undefined && content !== null) yield JSON.stringify(content);
}

/**
 * A prefix-stable serialisation of chat messages, one part per message (so each message's end is
 * a prefix boundary): its role, content, name and tool calls between separators, so a follow-up
 * that resends the conversation so far starts with exactly the earlier request's serialisation,
 * whatever it appends.
 */
function* messageParts(messages: readonly MessageLike[]): Generator<string> {
  for (const m of messages) {
    let s = `${m.role}\u0000`;
    for (const c of contentParts(m.content)) s += c;
    if (typeof m.name === 'string') s += `\u0000${m.name}`;
    if (m.tool_calls !== undefined && m.tool_calls !== null) s += `\u0000${JSON.stringify(m.tool_calls)}`;
    if (typeof m.tool_call_id === 'string') s += `\u0000${m.tool_call_id}`;
    yield `${s}\u0001`;
  }
}

/**
 * Prefix keys of a request's prompt with their parts' tokens (see `promptPrefixOfText` in core),
 * scoped by its model: chat
 * and Anthropic Messages (translated to chat) by their messages, Responses by the messages its
 * instructions and input make, completions by the prompt. Embeddings have none (nothing of
 * theirs stays in a prefix cache that a follow-up would reuse).
 */
export function promptPrefix(endpoint: Endpoint, body: RequestBody): PromptPrefix {
  switch (endpoint) {
    case 'chat':
      return promptPrefixOfText(body.model, messageParts((body as ChatCompletionBody).messages));
    case 'responses':
      return promptPrefixOfText(body.model, messageParts(responsesMessages(body as ResponsesBody)));
    case 'completions': {
      const p = (body as CompletionBody).prompt;
      return promptPrefixOfText(body.model, [typeof p === 'string' ? p : (p[0] ?? '')]);
    }
    case 'embeddings':
      return { keys: [], tokens: [] };
  }
}
