import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import jsonPatch, { type Operation } from 'fast-json-patch';
import { parse, parseAllDocuments } from 'yaml';

/**
 * Renders a kustomization the way `kubectl kustomize` does, for the subset infra/k8s uses —
 * resources (files and directories), secretGenerator with literals and no name hash, JSON 6902
 * patches, namespace and images — so that `npm test` can validate the manifests on a machine
 * without kubectl. Any other field is refused rather than ignored; k8s.test.ts compares the output
 * with kubectl's when kubectl is installed.
 */

/** A Kubernetes object as parsed from YAML. */
export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; [key: string]: unknown };
  [key: string]: unknown;
}

interface Kustomization {
  apiVersion?: string;
  kind?: string;
  resources?: string[];
  namespace?: string;
  images?: { name: string; newName?: string; newTag?: string }[];
  patches?: { target: { kind: string; name: string }; patch: string }[];
  secretGenerator?: { name: string; literals?: string[]; type?: string }[];
  generatorOptions?: { disableNameSuffixHash?: boolean };
}

const SUPPORTED = new Set([
  'apiVersion',
  'kind',
  'resources',
  'namespace',
  'images',
  'patches',
  'secretGenerator',
  'generatorOptions',
]);
/** Kinds without a namespace among those kustomize may meet here. */
const CLUSTER_SCOPED = new Set([
  'Namespace',
  'ClusterRole',
  'ClusterRoleBinding',
  'CustomResourceDefinition',
  'PersistentVolume',
  'StorageClass',
  'PriorityClass',
]);

/** The objects of a YAML file with one or more documents. */
export function readObjects(path: string): K8sObject[] {
  return parseAllDocuments(readFileSync(path, 'utf8'))
    .map((d) => d.toJS() as K8sObject | null)
    .filter((o): o is K8sObject => o !== null);
}

/** Sets every container image named `name` to the new name and tag. */
function setImages(node: unknown, images: NonNullable<Kustomization['images']>): void {
  if (Array.isArray(node)) {
    for (const item of node) setImages(item, images);
    return;
  }
  if (node === null || typeof node !== 'object') return;
  const record = node as Record<string, unknown>;
  for (const [key, value] of Object.entries(record)) {
    if ((key === 'containers' || key === 'initContainers') && Array.isArray(value)) {
      for (const container of value as { image?: string }[]) {
        if (container.image === undefined) continue;
        const [name, tag] = splitImage(container.image);
        const rule = images.find((i) => i.name === name);
        if (rule === undefined) continue;
        const newTag = rule.newTag ?? tag;
        container.image = `${rule.newName ?? name}${newTag === undefined ? '' : `:${newTag}`}`;
      }
    }
    setImages(value, images);
  }
}

/** `registry:5000/name:tag` → [`registry:5000/name`, `tag`]. */
export function splitImage(image: string): [string, string | undefined] {
  const slash = image.lastIndexOf('/');
  const colon = image.lastIndexOf(':');
  return colon > slash ? [image.slice(0, colon), image.slice(colon + 1)] : [image, undefined];
}

/** Renders the kustomization in `dir` (a directory with kustomization.yaml). */
export function renderKustomization(dir: string): K8sObject[] {
  const file = join(dir, 'kustomization.yaml');
  const k = parse(readFileSync(file, 'utf8')) as Kustomization;
  const unsupported = Object.keys(k).filter((key) => !SUPPORTED.has(key));
  if (unsupported.length > 0)
    throw new Error(`${file}: not supported by this renderer: ${unsupported.join(', ')}`);

  const objects: K8sObject[] = [];
  for (const resource of k.resources ?? []) {
    const path = resolve(dir, resource);
    if (!existsSync(path)) throw new Error(`${file}: resource ${resource} does not exist`);
    objects.push(...(statSync(path).isDirectory() ? renderKustomization(path) : readObjects(path)));
  }
  for (const generator of k.secretGenerator ?? []) {
    if (k.generatorOptions?.disableNameSuffixHash !== true)
      throw new Error(`${file}: name-hashed generators are not supported; set disableNameSuffixHash`);
    const data: Record<string, string> = {};
    for (const literal of generator.literals ?? []) {
      const eq = literal.indexOf('=');
      data[literal.slice(0, eq)] = Buffer.from(literal.slice(eq + 1)).toString('base64');
    }
    objects.push({
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: generator.name },
      type: generator.type ?? 'Opaque',
      data,
    });
  }
  for (const { target, patch } of k.patches ?? []) {
    const matches = objects.filter((o) => o.kind === target.kind && o.metadata.name === target.name);
    if (matches.length === 0)
      throw new Error(`${file}: patch target ${target.kind}/${target.name} not found`);
    const operations = parse(patch) as Operation[];
    for (const match of matches) jsonPatch.applyPatch(match, operations, true, true);
  }
  if (k.namespace !== undefined)
    for (const o of objects) if (!CLUSTER_SCOPED.has(o.kind)) o.metadata.namespace = k.namespace;
  if (k.images !== undefined) setImages(objects, k.images);
  return objects;
}

/** The overlays under `dir` (each subdirectory with a kustomization.yaml). */
export function overlayDirs(dir: string): string[] {
  return readdirSync(dir)
    .map((o) => join(dir, o))
    .filter((d) => existsSync(join(d, 'kustomization.yaml')));
}

/** `Kind/namespace/name`, the identity of an object in a render. */
export function objectId(o: K8sObject): string {
  return `${o.kind}/${o.metadata.namespace ?? ''}/${o.metadata.name}`;
}
