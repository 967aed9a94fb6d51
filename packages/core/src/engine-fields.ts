/**
 * vLLM request fields a tenant must not set freely. Every other field of the OpenAI and vLLM
 * request schemas is forwarded as the client sent it.
 *
 * - Restricted fields reach the engine only from keys granted them (`engineFields` on the key or
 *   its tenant): `kv_transfer_params` points a disaggregated-prefill engine at another host's KV
 *   blocks, `chat_template` replaces the model's template (and what the prompt estimate assumed),
 *   `request_id` names the engine's request (one tenant could collide with another's),
 *   `logits_processors` and `vllm_xargs` run or configure server-side code, and `best_of`
 *   generates that many sequences while the request is charged for one.
 * - Gateway-owned fields are set by fairway alone: `priority` orders vLLM's queue under
 *   `--scheduling-policy priority`, so fairway derives it from the request's SLO class.
 */
export const RESTRICTED_ENGINE_FIELDS: ReadonlySet<string> = new Set([
  'kv_transfer_params',
  'chat_template',
  'request_id',
  'logits_processors',
  'vllm_xargs',
  'best_of',
]);

/** Fields only fairway sets on the engine request; a client's is refused (see {@link RESTRICTED_ENGINE_FIELDS}). */
export const GATEWAY_OWNED_FIELDS: ReadonlySet<string> = new Set(['priority']);
