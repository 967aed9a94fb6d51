import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { loadConfig } from '@fairway/core';
import { ScaledObject } from '@kubernetes-models/keda/keda.sh/v1alpha1';
import { Deployment, StatefulSet } from 'kubernetes-models/apps/v1';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';
import { ConfigMap, Secret, Service } from 'kubernetes-models/v1';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { cliArgsProblem } from './support/cli-args.ts';
import {
  type K8sObject,
  objectId,
  overlayDirs,
  readObjects,
  renderKustomization,
  splitImage,
} from './support/kustomize.ts';
import { REPO_ROOT } from './support/repo.ts';

/**
 * The Kubernetes manifests (infra/k8s: a kustomize base and overlays), rendered and checked as
 * `kubectl apply` would need them to be: every object against the Kubernetes schemas of
 * kubernetes-models (at run time, and through its TypeScript types, which also reject misspelt
 * fields), every ConfigMap, Secret, Service and scale target that is referenced exists, and the
 * deployment's promises hold: probes, resources, non-root fairway containers, pinned images, the
 * vLLM replicas scaled on fairway_desired_replicas for a pool the config really scales.
 */

const K8S = join(REPO_ROOT, 'infra/k8s');
const OVERLAYS = overlayDirs(join(K8S, 'overlays'));
const renders = new Map(OVERLAYS.map((dir) => [basename(dir), renderKustomization(dir)]));

/** The kubernetes-models class (and the TypeScript interface) of each kind the manifests use. */
const MODELS: Record<
  string,
  { model: new (data: never) => { validate(): void }; module: string; type: string }
> = {
  'v1/ConfigMap': { model: ConfigMap, module: 'kubernetes-models/v1', type: 'IConfigMap' },
  'v1/Secret': { model: Secret, module: 'kubernetes-models/v1', type: 'ISecret' },
  'v1/Service': { model: Service, module: 'kubernetes-models/v1', type: 'IService' },
  'apps/v1/Deployment': { model: Deployment, module: 'kubernetes-models/apps/v1', type: 'IDeployment' },
  'apps/v1/StatefulSet': { model: StatefulSet, module: 'kubernetes-models/apps/v1', type: 'IStatefulSet' },
  'autoscaling/v2/HorizontalPodAutoscaler': {
    model: HorizontalPodAutoscaler,
    module: 'kubernetes-models/autoscaling/v2',
    type: 'IHorizontalPodAutoscaler',
  },
  'policy/v1/PodDisruptionBudget': {
    model: PodDisruptionBudget,
    module: 'kubernetes-models/policy/v1',
    type: 'IPodDisruptionBudget',
  },
  'keda.sh/v1alpha1/ScaledObject': {
    model: ScaledObject,
    module: '@kubernetes-models/keda/keda.sh/v1alpha1',
    type: 'IScaledObject',
  },
};

/** Objects an overlay expects to find in the cluster rather than create (docs/operators/deploy.md says how). */
const EXTERNAL: Record<string, string[]> = {
  dev: ['Secret/fairway-dev/fairway-operator'],
  production: ['Secret/fairway/fairway-credentials', 'Secret/fairway/fairway-operator'],
};

interface Container {
  name: string;
  image: string;
  args?: string[];
  ports?: { name?: string; containerPort: number }[];
  env?: { name: string; value?: string; valueFrom?: Record<string, { name: string; key: string }> }[];
  envFrom?: { configMapRef?: { name: string }; secretRef?: { name: string } }[];
  resources?: { requests?: Record<string, string>; limits?: Record<string, string> };
  securityContext?: Record<string, unknown>;
  startupProbe?: Probe;
  readinessProbe?: Probe;
  livenessProbe?: Probe;
}
interface Probe {
  httpGet?: { path: string; port: string | number };
  tcpSocket?: { port: string | number };
  exec?: { command: string[] };
}
interface PodSpec {
  containers: Container[];
  securityContext?: Record<string, unknown>;
  volumes?: { name: string; configMap?: { name: string }; secret?: { secretName: string } }[];
}
type Workload = K8sObject & {
  spec: { serviceName?: string; template: { metadata: { labels: Record<string, string> }; spec: PodSpec } };
};

function workloads(objects: readonly K8sObject[]): Workload[] {
  return objects.filter((o): o is Workload => o.kind === 'Deployment' || o.kind === 'StatefulSet');
}

function find(objects: readonly K8sObject[], kind: string, name: string): K8sObject | undefined {
  return objects.find((o) => o.kind === kind && o.metadata.name === name);
}

function matches(selector: Record<string, string>, labels: Record<string, string>): boolean {
  return Object.entries(selector).every(([k, v]) => labels[k] === v);
}

/** What a render refers to by name: ConfigMaps, Secrets, and the keys taken from them. */
function references(objects: readonly K8sObject[]): { id: string; key?: string }[] {
  const refs: { id: string; key?: string }[] = [];
  for (const w of workloads(objects)) {
    const ns = w.metadata.namespace ?? '';
    const spec = w.spec.template.spec;
    for (const v of spec.volumes ?? []) {
      if (v.configMap) refs.push({ id: `ConfigMap/${ns}/${v.configMap.name}` });
      if (v.secret) refs.push({ id: `Secret/${ns}/${v.secret.secretName}` });
    }
    for (const c of spec.containers) {
      for (const from of c.envFrom ?? []) {
        if (from.configMapRef) refs.push({ id: `ConfigMap/${ns}/${from.configMapRef.name}` });
        if (from.secretRef) refs.push({ id: `Secret/${ns}/${from.secretRef.name}` });
      }
      for (const e of c.env ?? []) {
        const secret = e.valueFrom?.secretKeyRef;
        const config = e.valueFrom?.configMapKeyRef;
        if (secret) refs.push({ id: `Secret/${ns}/${secret.name}`, key: secret.key });
        if (config) refs.push({ id: `ConfigMap/${ns}/${config.name}`, key: config.key });
      }
    }
  }
  return refs;
}

const kubectl = (() => {
  try {
    execFileSync('kubectl', ['version', '--client'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();

describe('infra/k8s', () => {
  it('has the dev and production overlays', () => {
    expect([...renders.keys()].sort()).toEqual(['dev', 'production']);
  });

  it.skipIf(!kubectl)('renders exactly what `kubectl kustomize` renders (kubectl installed)', () => {
    for (const dir of OVERLAYS) {
      const yaml = execFileSync('kubectl', ['kustomize', dir], { encoding: 'utf8' });
      const tmp = mkdtempSync(join(tmpdir(), 'fairway-kustomize-'));
      try {
        writeFileSync(join(tmp, 'out.yaml'), yaml);
        const sort = (os: K8sObject[]) => [...os].sort((a, b) => objectId(a).localeCompare(objectId(b)));
        expect(sort(renderKustomization(dir))).toEqual(sort(readObjects(join(tmp, 'out.yaml'))));
      } finally {
        rmSync(tmp, { recursive: true, force: true });
      }
    }
  });

  for (const [overlay, objects] of renders) {
    describe(`overlay ${overlay}`, () => {
      it('every object validates against the Kubernetes (and KEDA) schemas', () => {
        for (const o of objects) {
          const entry = MODELS[`${o.apiVersion}/${o.kind}`];
          expect(entry, `a schema for ${o.apiVersion} ${o.kind}`).toBeDefined();
          expect(() => new entry!.model(o as never).validate(), objectId(o)).not.toThrow();
        }
        expect(new Set(objects.map(objectId)).size).toBe(objects.length);
      });

      it('every object type-checks as its kubernetes-models type: no misspelt or unknown field', () => {
        expect(typeErrors(objects)).toEqual([]);
      });

      it('every ConfigMap, Secret and key referenced exists (or is documented as created outside)', () => {
        const ids = new Set(objects.map(objectId));
        const missing = [...new Set(references(objects).map((r) => r.id))].filter((id) => !ids.has(id));
        expect(missing.sort()).toEqual(EXTERNAL[overlay]);
        for (const ref of references(objects)) {
          if (ref.key === undefined || !ids.has(ref.id)) continue;
          const [kind, , name] = ref.id.split('/');
          const data = find(objects, kind!, name!)?.data as Record<string, string>;
          expect(Object.keys(data), `${ref.id} has ${ref.key}`).toContain(ref.key);
        }
      });

      it('every Service, scale target and disruption budget selects a workload that exists', () => {
        const ws = workloads(objects);
        for (const s of objects.filter((o) => o.kind === 'Service')) {
          const spec = s.spec as {
            selector: Record<string, string>;
            ports: { targetPort: string | number }[];
          };
          const selected = ws.filter((w) => matches(spec.selector, w.spec.template.metadata.labels));
          expect(selected.length, `Service ${s.metadata.name} selects a workload`).toBeGreaterThan(0);
          for (const { targetPort } of spec.ports) {
            const named = selected[0]!.spec.template.spec.containers.flatMap((c) => c.ports ?? []);
            expect(
              named.some((p) => p.name === targetPort || p.containerPort === targetPort),
              `${s.metadata.name} → ${targetPort}`,
            ).toBe(true);
          }
        }
        for (const o of objects.filter(
          (x) => x.kind === 'HorizontalPodAutoscaler' || x.kind === 'ScaledObject',
        )) {
          const target = (o.spec as { scaleTargetRef: { kind: string; name: string } }).scaleTargetRef;
          const scaled = find(objects, target.kind, target.name);
          expect(scaled, `${o.kind} ${o.metadata.name}`).toBeDefined();
          // The autoscaler owns the count: a replicas field would reset it on every apply.
          expect((scaled!.spec as { replicas?: number }).replicas, `${target.name} replicas`).toBeUndefined();
        }
        for (const pdb of objects.filter((o) => o.kind === 'PodDisruptionBudget')) {
          const selector = (pdb.spec as { selector: { matchLabels: Record<string, string> } }).selector
            .matchLabels;
          expect(ws.some((w) => matches(selector, w.spec.template.metadata.labels))).toBe(true);
        }
        for (const w of ws.filter((x) => x.kind === 'StatefulSet')) {
          const svc = find(objects, 'Service', w.spec.serviceName ?? '');
          expect(svc, `StatefulSet ${w.metadata.name}'s service`).toBeDefined();
        }
      });

      it('fairway reaches Redis, NATS and each replica by names that resolve in the cluster', () => {
        const env = find(objects, 'ConfigMap', 'fairway-env')?.data as Record<string, string>;
        for (const url of [env.REDIS_URL!, env.NATS_URL!]) {
          const { hostname, port } = new URL(url);
          if (hostname.includes('.')) continue; // outside the namespace: production's managed services
          const svc = find(objects, 'Service', hostname);
          expect(svc, url).toBeDefined();
          expect((svc!.spec as { ports: { port: number }[] }).ports.map((p) => String(p.port))).toContain(
            port,
          );
        }
        for (const w of workloads(objects))
          for (const c of w.spec.template.spec.containers) {
            const i = c.args?.indexOf('--advertise-url') ?? -1;
            if (i < 0) continue;
            const { hostname, port } = new URL(c.args![i + 1]!.replace('$(POD_NAME)', 'pod-0'));
            expect(hostname.split('.')[1], 'the headless service of the pod').toBe(w.spec.serviceName);
            expect(find(objects, 'Service', w.spec.serviceName ?? '')?.spec).toMatchObject({
              clusterIP: 'None',
            });
            expect(c.args).toContain('--engine-url');
            expect(port).toBe('8000');
          }
      });

      it("every fairway container's arguments parse with the real CLI", async () => {
        for (const w of workloads(objects))
          for (const c of w.spec.template.spec.containers) {
            if (!splitImage(c.image)[0].endsWith('fairway')) continue;
            const args = (c.args ?? []).map((a) => a.replaceAll('$(POD_NAME)', `${w.metadata.name}-0`));
            expect(await cliArgsProblem(args), `${w.metadata.name}/${c.name}`).toBeUndefined();
          }
      });

      it('every container pins its image and declares resources; fairway containers run unprivileged', () => {
        for (const w of workloads(objects))
          for (const c of w.spec.template.spec.containers) {
            const [, tag] = splitImage(c.image);
            expect(tag, c.image).toMatch(/^v?\d+\.\d+\.\d+/);
            expect(c.resources?.requests?.memory, `${c.name} memory request`).toBeDefined();
            expect(c.resources?.limits?.memory, `${c.name} memory limit`).toBeDefined();
            if (!splitImage(c.image)[0].endsWith('fairway')) continue;
            const security = { ...w.spec.template.spec.securityContext, ...c.securityContext };
            expect(security).toMatchObject({
              runAsNonRoot: true,
              allowPrivilegeEscalation: false,
              readOnlyRootFilesystem: true,
            });
          }
      });

      it('dispatchers: probes on /health and /ready, a Service, an HPA and a disruption budget', () => {
        const d = find(objects, 'Deployment', 'fairway-dispatcher') as Workload;
        const c = d.spec.template.spec.containers[0]!;
        expect(c.args?.[0]).toBe('serve');
        expect(c.readinessProbe?.httpGet?.path).toBe('/ready');
        expect(c.livenessProbe?.httpGet?.path).toBe('/health');
        expect(c.startupProbe?.httpGet?.path).toBe('/health');
        expect(c.resources?.requests?.cpu).toBeDefined();
        expect(find(objects, 'HorizontalPodAutoscaler', 'fairway-dispatcher')).toBeDefined();
        expect(find(objects, 'PodDisruptionBudget', 'fairway-dispatcher')).toBeDefined();
        expect(c.env?.find((e) => e.name === 'NATS_PASSWORD')?.valueFrom?.secretKeyRef).toBeDefined();
        // Prometheus scrapes the operator port from outside the pod: it must not bind loopback.
        expect(c.env?.find((e) => e.name === 'FAIRWAY_OPERATOR_HOST')?.value).toBe('0.0.0.0');
        const annotations = d.spec.template.metadata as { annotations?: Record<string, string> };
        const operator = c.ports?.find((p) => p.name === 'operator')?.containerPort;
        expect(annotations.annotations?.['prometheus.io/port']).toBe(String(operator));
      });

      it('vLLM replicas: a pinned vLLM with startup and readiness probes on /health, a GPU, the agent beside it', () => {
        const s = find(objects, 'StatefulSet', 'vllm-llama-2-7b') as Workload;
        const [vllm, agent] = s.spec.template.spec.containers;
        expect(vllm?.image).toMatch(/^vllm\/vllm-openai:v\d+\.\d+\.\d+$/);
        expect(vllm?.startupProbe?.httpGet?.path).toBe('/health');
        expect(vllm?.readinessProbe?.httpGet?.path).toBe('/health');
        expect(vllm?.resources?.limits?.['nvidia.com/gpu']).toBe('1');
        expect(agent?.args?.[0]).toBe('agent');
        const model = vllm?.args?.[vllm.args.indexOf('--served-model-name') + 1];
        expect(agent?.args?.[agent.args.indexOf('--model') + 1]).toBe(model);
        expect(agent?.args?.[agent.args.indexOf('--engine-url') + 1]).toBe(
          `http://127.0.0.1:${vllm?.args?.[vllm.args.indexOf('--port') + 1]}`,
        );
      });

      it('fairway-config is a valid fairway config, and KEDA follows the desired replicas of a pool it scales', () => {
        const data = find(objects, 'ConfigMap', 'fairway-config')?.data as Record<string, string>;
        const dir = mkdtempSync(join(tmpdir(), 'fairway-k8s-config-'));
        try {
          writeFileSync(join(dir, 'fairway.yaml'), data['fairway.yaml']!);
          const config = loadConfig(join(dir, 'fairway.yaml'));
          const scaled = objects.find((o) => o.kind === 'ScaledObject')!;
          const trigger = (scaled.spec as { triggers: { metadata: { query: string } }[] }).triggers[0]!;
          const pool = /fairway_desired_replicas\{pool="([^"]+)"\}/.exec(trigger.metadata.query)?.[1];
          expect(config.policy.scaling.map((s) => s.pool)).toContain(pool);
          const agent = (find(objects, 'StatefulSet', 'vllm-llama-2-7b') as Workload).spec.template.spec
            .containers[1]!;
          expect(agent.args?.[agent.args.indexOf('--pool') + 1]).toBe(pool);
          expect(config.pools.map((p) => p.id)).toContain(pool);
        } finally {
          rmSync(dir, { recursive: true, force: true });
        }
      });
    });
  }

  it("dev's in-cluster Redis runs the compose stack's redis.conf", () => {
    const redis = find(renders.get('dev')!, 'ConfigMap', 'redis-config')?.data as Record<string, string>;
    expect(redis['redis.conf']).toBe(readFileSync(join(REPO_ROOT, 'infra/redis/redis.conf'), 'utf8'));
  });

  it("dev's in-cluster NATS: accepted by nats-server, the shipped roles, a user for every fairway container and every replica the ScaledObject may start", () => {
    const dev = renders.get('dev')!;
    const conf = (find(dev, 'ConfigMap', 'nats-config')!.data as Record<string, string>)['nats-server.conf']!;
    const shipped = readFileSync(join(REPO_ROOT, 'infra/nats/nats-server.conf'), 'utf8');
    const role = (text: string, name: string): string =>
      text.slice(text.indexOf(`${name} = {`)).split('\n  }\n')[0]!;
    for (const name of ['DISPATCHER', 'ADMIN']) expect(role(conf, name)).toBe(role(shipped, name));

    const secret = find(dev, 'Secret', 'fairway-credentials')?.data as Record<string, string>;
    const nats = find(dev, 'StatefulSet', 'nats') as Workload;
    const env: Record<string, string> = {};
    for (const e of nats.spec.template.spec.containers[0]!.env ?? [])
      env[e.name] = Buffer.from(secret[e.valueFrom!.secretKeyRef!.key]!, 'base64').toString();
    const dir = mkdtempSync(join(tmpdir(), 'fairway-k8s-nats-'));
    try {
      writeFileSync(join(dir, 'nats-server.conf'), conf);
      const out = execFileSync('nats-server', ['-t', '-c', join(dir, 'nats-server.conf')], {
        env: { ...process.env, PATH: `${process.env.PATH}:/usr/sbin`, ...env },
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      expect(out).toBe('');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }

    for (const w of workloads(dev))
      for (const c of w.spec.template.spec.containers) {
        const user = c.env?.find((e) => e.name === 'NATS_USER')?.value;
        if (user !== undefined)
          expect(conf, `${c.name}: NATS user ${user}`).toMatch(new RegExp(`user: ${user}[,\\s]`));
      }
    const scaled = dev.find((o) => o.kind === 'ScaledObject')!;
    const max = (scaled.spec as { maxReplicaCount: number }).maxReplicaCount;
    for (let i = 0; i < max; i++) expect(conf).toContain(`"fairway.replica.vllm-llama-2-7b-${i}.>"`);
  });
});

/**
 * Type-checks each object as its kubernetes-models interface in a virtual TypeScript file: object
 * literals get excess-property checks, so a misspelt field (`readinesProbe`) is an error here
 * although the JSON schemas accept unknown fields.
 */
function typeErrors(objects: readonly K8sObject[]): string[] {
  const file = join(REPO_ROOT, 'test/infra/__k8s_objects__.ts');
  const imports = new Map<string, Set<string>>();
  const lines = objects.map((o, i) => {
    const entry = MODELS[`${o.apiVersion}/${o.kind}`]!;
    imports.set(entry.module, (imports.get(entry.module) ?? new Set()).add(entry.type));
    return `// ${objectId(o)}\nexport const o${i}: ${entry.type} = ${JSON.stringify(o, null, 1)};`;
  });
  const source = [
    ...[...imports].map(([module, types]) => `import type { ${[...types].join(', ')} } from '${module}';`),
    ...lines,
  ].join('\n');
  const options: ts.CompilerOptions = {
    strict: true,
    noEmit: true,
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    skipLibCheck: true,
    types: [],
  };
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (name, version, ...rest) =>
    name === file ? ts.createSourceFile(name, source, version) : getSourceFile(name, version, ...rest);
  const fileExists = host.fileExists.bind(host);
  host.fileExists = (name) => name === file || fileExists(name);
  const program = ts.createProgram([file], options, host);
  return ts.getPreEmitDiagnostics(program).map((d) => {
    const message = ts.flattenDiagnosticMessageText(d.messageText, '\n').split('\n').slice(-1)[0];
    if (d.file === undefined || d.start === undefined) return message ?? '';
    const line = d.file.getLineAndCharacterOfPosition(d.start).line;
    const owner = source
      .split('\n')
      .slice(0, line + 1)
      .reverse()
      .find((l) => l.startsWith('// '));
    return `${owner?.slice(3)}: ${message}`;
  });
}
