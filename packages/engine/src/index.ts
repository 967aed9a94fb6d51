export type {
  AbortSignalLike,
  CompletionBody,
  CompletionEndpoint,
  CompletionResult,
  EmbeddingResult,
  Engine,
  EngineModelCard,
  EngineStream,
  GenerateOptions,
  StreamOptions,
} from './engine.ts';
export {
  type EngineProfileOptions,
  type EngineProfileSamples,
  type FittedEngineProfile,
  fitEngineProfile,
  type ProfiledReplica,
  profileEngineMetrics,
} from './engine-profiler.ts';
export {
  EngineAbortedError,
  EngineBadResponseError,
  EngineConnectionLostError,
  EngineError,
  EngineErrorCode,
  EngineHttpError,
  EngineProfileError,
  EngineTimeoutError,
  type EngineTimeoutPhase,
  EngineUnreachableError,
  MetricsFormatError,
  TokenizerLoadError,
} from './errors.ts';
export {
  type HistogramTotals,
  histogramOf,
  type ParseVllmMetricsOptions,
  parseVllmMetrics,
  VLLM_METRIC,
  type VllmMetrics,
} from './metrics-parser.ts';
export {
  type ChatChunkLike,
  type ChatCompletionLike,
  chatBodyOf,
  chatExpresses,
  chatMessagesOf,
  ResponsesFromChat,
  type ResponsesInputItem,
  type ResponsesRequestLike,
} from './responses-chat.ts';
export { ResponsesScanner } from './responses-scanner.ts';
export { type EngineUsage, type SseDataLine, SseDataLines, SseScanner } from './sse.ts';
export { type LoadedTokenizer, loadTokenizer } from './tokenizer.ts';
export { VllmClient, type VllmClientOptions } from './vllm-client.ts';
