import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { ConfigError, ErrorCode, type FairwayConfig } from '@fairway/core';
import { type PerformanceModel, PolicyInputError, parsePerformanceModelFile } from '@fairway/policy';

/** What a replica is, as far as choosing its performance model goes. */
export interface ReplicaIdentity {
  /** Model it serves. */
  readonly model: string;
  /** GPU it runs on; a replica that does not say has no performance model. */
  readonly gpu?: string | undefined;
  /** Tensor-parallel degree. */
  readonly tp: number;
}

const keyOf = (model: string, gpu: string, tp: number): string => `${model}\u0000${gpu}\u0000${tp}`;

function invalid(path: string, message: string): ConfigError {
  return new ConfigError(ErrorCode.CONFIG_INVALID, 'fairway config', [{ path, message }]);
}

/**
 * Reads `policy.performanceModels` (files from `fairway profile`, relative to the working
 * directory). An unreadable or invalid file, or two for one (model, GPU, TP), is a `ConfigError`
 * naming the entry, raised at start-up.
 */
export function loadPerformanceModels(paths: readonly string[]): PerformanceModel[] {
  const models: PerformanceModel[] = [];
  const seen = new Map<string, string>();
  paths.forEach((path, i) => {
    const where = `policy.performanceModels.${i}`;
    let json: unknown;
    try {
      json = JSON.parse(readFileSync(resolve(path), 'utf8'));
    } catch (err) {
      throw invalid(where, `cannot read ${path} as JSON (${(err as Error).message})`);
    }
    let model: PerformanceModel;
    try {
      model = parsePerformanceModelFile(json).model;
    } catch (err) {
      if (!(err instanceof PolicyInputError)) throw err;
      throw invalid(
        where,
        `${path}: ${err.issues.map((x) => `${x.path || '(root)'}: ${x.message}`).join('; ')}`,
      );
    }
    const key = keyOf(model.model, model.gpu, model.tp);
    const other = seen.get(key);
    if (other !== undefined) {
      throw invalid(where, `${path} and ${other} both describe ${model.model} on ${model.gpu} × ${model.tp}`);
    }
    seen.set(key, path);
    models.push(model);
  });
  return models;
}

/**
 * The performance model of a replica by id: its identity from `identityOf` (the replica
 * registry's registration), else from the config's `engines` entry of that id (GPU, TP and its
 * pool's model), matched on (model, GPU, TP). Undefined when nothing matches.
 */
export function performanceModelOf(
  models: readonly PerformanceModel[],
  config: FairwayConfig,
  identityOf: ((replicaId: string) => ReplicaIdentity | undefined) | undefined,
): (replicaId: string) => PerformanceModel | undefined {
  const byKey = new Map(models.map((m) => [keyOf(m.model, m.gpu, m.tp), m]));
  const poolModel = new Map(config.pools.map((p) => [p.id, p.model]));
  const configured = new Map<string, ReplicaIdentity>();
  for (const e of config.engines) {
    const model = poolModel.get(e.pool);
    if (model !== undefined) configured.set(e.id, { model, gpu: e.gpu, tp: e.tp });
  }
  return (replicaId) => {
    const id = identityOf?.(replicaId) ?? configured.get(replicaId);
    if (id?.gpu === undefined) return undefined;
    return byKey.get(keyOf(id.model, id.gpu, id.tp));
  };
}
