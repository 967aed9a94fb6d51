import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { loadConfig } from '@fairway/core';
import { serveEnvSchema } from '@fairway/dispatcher';
import { freePort } from '@fairway/testkit';
import { ScaledObject } from '@kubernetes-models/keda/keda.sh/v1alpha1';
import { PodMonitor } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1';
import { Deployment, StatefulSet } from 'kubernetes-models/apps/v1';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2';
import { Ingress, NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';
import { ConfigMap, Secret, Service } from 'kubernetes-models/v1';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
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
 * vLLM replicas scaled on fairway_desired_replicas for a pool the config really scales, Prometheus
 * told to scrape the dispatchers that export it, vLLM's port closed to all but the dispatchers, a
 * three-node NATS cluster in dev, TLS and Secrets in production. The prometheus-operator kinds are
 * checked with @kubernetes-models/prometheus-operator (generated from the operator's CRDs).
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
  'monitoring.coreos.com/v1/PodMonitor': {
    model: PodMonitor,
    module: '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1',
    type: 'IPodMonitor',
  },
  'networking.k8s.io/v1/NetworkPolicy': {
    model: NetworkPolicy,
    module: 'kubernetes-models/networking.k8s.io/v1',
    type: 'INetworkPolicy',
  },
  'networking.k8s.io/v1/Ingress': {
    model: Ingress,
    module: 'kubernetes-models/networking.k8s.io/v1',
    type: 'IIngress',
  },
};

/**
 * Objects an overlay expects to find in the cluster rather than create (its kustomization.yaml and
 * docs/operators/kubernetes.md say how). Secrets referenced as optional are not listed.
 */
const EXTERNAL: Record<string, string[]> = {
  dev: ['Secret/fairway-dev/fairway-operator'],
  production: [
    'Secret/fairway/fairway-admin-token',
    'Secret/fairway/fairway-credentials',
    'Secret/fairway/fairway-operator',
    'Secret/fairway/fairway-tls',
  ],
};

interface Container {
  name: string;
  image: string;
  args?: string[];
  ports?: { name?: string; containerPort: number }[];
  env?: {
    name: string;
    value?: string;
    valueFrom?: Record<string, { name: string; key: string; optional?: boolean }>;
  }[];
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
interface Mount {
  name: string;
  mountPath: string;
}
type Workload = K8sObject & {
  spec: {
    serviceName?: string;
    replicas?: number;
    template: { metadata: { labels: Record<string, string> }; spec: PodSpec };
    volumeClaimTemplates?: { metadata: { name: string } }[];
  };
};

function flag(args: readonly string[], name: string): string | undefined {
  const i = args.indexOf(name);
  return i < 0 ? undefined : args[i + 1];
}

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
        if (secret && secret.optional !== true)
          refs.push({ id: `Secret/${ns}/${secret.name}`, key: secret.key });
        if (config) refs.push({ id: `ConfigMap/${ns}/${config.name}`, key: config.key });
      }
    }
  }
  for (const ingress of objects.filter((o) => o.kind === 'Ingress')) {
    const tls = (ingress.spec as { tls?: { secretName: string }[] }).tls ?? [];
    for (const t of tls) refs.push({ id: `Secret/${ingress.metadata.namespace ?? ''}/${t.secretName}` });
  }
  return refs;
}

/**
 * A container's environment as the kubelet builds it: envFrom ConfigMaps in the render, then env
 * entries in order (later ones win), `$(NAME)` replaced by a variable defined before it. Values
 * from Secrets are `<secret:name/key>` (or the Secret's data when the render holds it).
 */
function containerEnv(objects: readonly K8sObject[], c: Container): Record<string, string> {
  const env: Record<string, string> = {};
  for (const from of c.envFrom ?? [])
    if (from.configMapRef)
      Object.assign(env, find(objects, 'ConfigMap', from.configMapRef.name)?.data as Record<string, string>);
  for (const e of c.env ?? []) {
    const secret = e.valueFrom?.secretKeyRef;
    if (secret) {
      const data = find(objects, 'Secret', secret.name)?.data as Record<string, string> | undefined;
      const value = data?.[secret.key];
      env[e.name] =
        value === undefined ? `secret-${secret.name}-${secret.key}` : Buffer.from(value, 'base64').toString();
    } else if (e.value !== undefined)
      env[e.name] = e.value.replace(
        /\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g,
        (all, name: string) => env[name] ?? all,
      );
  }
  return env;
}

/** The workloads whose pods a label selector (matchLabels) picks. */
function selected(objects: readonly K8sObject[], selector: Record<string, string>): Workload[] {
  return workloads(objects).filter((w) => matches(selector, w.spec.template.metadata.labels));
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
        const d = find(objects, 'Deployment', 'fairway-dispatcher') as Workload;
        const env = containerEnv(objects, d.spec.template.spec.containers[0]!);
        // The dispatcher reads its environment with this schema: a bad URL would stop it at start.
        expect(serveEnvSchema.safeParse(env).error).toBeUndefined();
        for (const url of [env.REDIS_URL!, ...env.NATS_URL!.split(',')]) {
          const { hostname, port } = new URL(url);
          const labels = hostname.split('.');
          if (labels.length > 2) continue; // outside the namespace: production's managed services
          const svc = find(objects, 'Service', labels.at(-1)!);
          expect(svc, url).toBeDefined();
          expect((svc!.spec as { ports: { port: number }[] }).ports.map((p) => String(p.port))).toContain(
            port,
          );
          if (labels.length === 2) {
            // <pod>.<headless service>: a pod the StatefulSet behind that service runs
            const set = workloads(objects).find(
              (w) => w.kind === 'StatefulSet' && w.spec.serviceName === labels[1],
            );
            expect(set, url).toBeDefined();
            expect(svc!.spec).toMatchObject({ clusterIP: 'None' });
            const ordinal = Number(labels[0]!.slice(set!.metadata.name.length + 1));
            expect(labels[0]!.startsWith(`${set!.metadata.name}-`), url).toBe(true);
            expect(ordinal, url).toBeLessThan(set!.spec.replicas ?? 1);
          }
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

      it("Prometheus scrapes every dispatcher's operator port (PodMonitor), where the ScaledObject's metric is exported", () => {
        const d = find(objects, 'Deployment', 'fairway-dispatcher') as Workload;
        const monitors = objects.filter((o) => o.kind === 'PodMonitor');
        const scraping = monitors.filter((m) =>
          matches(
            (m.spec as { selector: { matchLabels: Record<string, string> } }).selector.matchLabels,
            d.spec.template.metadata.labels,
          ),
        );
        expect(scraping.map((m) => m.metadata.name)).toEqual(['fairway-dispatcher']);
        const [endpoint] = (scraping[0]!.spec as { podMetricsEndpoints: { port: string; path: string }[] })
          .podMetricsEndpoints;
        const c = d.spec.template.spec.containers[0]!;
        // The port that serves /metrics: the operator port, bound beyond loopback.
        expect(c.ports?.find((p) => p.name === endpoint?.port)?.containerPort).toBe(9464);
        expect(endpoint?.path).toBe('/metrics');
        expect(containerEnv(objects, c).FAIRWAY_OPERATOR_HOST).toBe('0.0.0.0');
        // The ScaledObject asks the Prometheus of prometheus-operator (its prometheus-operated Service).
        const scaled = objects.find((o) => o.kind === 'ScaledObject')!;
        const trigger = (scaled.spec as { triggers: { metadata: { serverAddress: string } }[] }).triggers[0]!;
        expect(new URL(trigger.metadata.serverAddress).hostname).toMatch(/^prometheus-operated\./);
      });

      it("only the dispatchers may reach vLLM's port; the agent beside it uses the pod's loopback", () => {
        const vllm = find(objects, 'StatefulSet', 'vllm-llama-2-7b') as Workload;
        const policies = objects.filter(
          (o) =>
            o.kind === 'NetworkPolicy' &&
            matches(
              (o.spec as { podSelector: { matchLabels: Record<string, string> } }).podSelector.matchLabels,
              vllm.spec.template.metadata.labels,
            ),
        );
        expect(policies).toHaveLength(1);
        const spec = policies[0]!.spec as {
          policyTypes: string[];
          ingress: {
            from: {
              podSelector?: { matchLabels: Record<string, string> };
              namespaceSelector?: unknown;
              ipBlock?: unknown;
            }[];
            ports: { port: string | number }[];
          }[];
        };
        expect(spec.policyTypes).toContain('Ingress');
        const peers = spec.ingress.flatMap((rule) => rule.from ?? []);
        // No namespace- or address-wide peers: only pods of this namespace picked by label.
        expect(peers.every((p) => p.namespaceSelector === undefined && p.ipBlock === undefined)).toBe(true);
        const admitted = new Set(
          peers.flatMap((p) =>
            selected(objects, p.podSelector?.matchLabels ?? {}).map((w) => w.metadata.name),
          ),
        );
        expect([...admitted]).toEqual(['fairway-dispatcher']);
        // An empty podSelector ({}) would select every pod: it must name the dispatchers.
        expect(peers.every((p) => Object.keys(p.podSelector?.matchLabels ?? {}).length > 0)).toBe(true);
        const [engine, agent] = vllm.spec.template.spec.containers;
        const port = engine!.ports!.find((p) => p.containerPort === 8000)!;
        expect(spec.ingress.flatMap((r) => r.ports.map((p) => p.port))).toEqual([port.name]);
        expect(containerEnv(objects, engine!).VLLM_SERVER_DEV_MODE).toBe('1');
        expect(new URL(agent!.args![agent!.args!.indexOf('--engine-url') + 1]!).hostname).toBe('127.0.0.1');
      });

      it('vLLM: a Hugging Face token from an optional Secret, and a model cache volume per replica at HF_HOME', () => {
        const vllm = find(objects, 'StatefulSet', 'vllm-llama-2-7b') as Workload;
        const engine = vllm.spec.template.spec.containers[0]! as Container & { volumeMounts: Mount[] };
        const token = engine.env?.find((e) => e.name === 'HF_TOKEN')?.valueFrom?.secretKeyRef;
        expect(token).toMatchObject({ name: 'hf-token', key: 'token', optional: true });
        const home = containerEnv(objects, engine).HF_HOME;
        const claims = (vllm.spec.volumeClaimTemplates ?? []).map((t) => t.metadata.name);
        const cache = engine.volumeMounts.find((m) => m.mountPath === home);
        expect(cache, `a volume at HF_HOME ${home}`).toBeDefined();
        expect(claims).toContain(cache!.name);
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

  it("dev's in-cluster Redis and NATS run the compose stack's images", () => {
    const compose = parseYaml(readFileSync(join(REPO_ROOT, 'infra/docker-compose.yml'), 'utf8'), {
      merge: true,
    }) as { services: Record<string, { image?: string }> };
    const dev = renders.get('dev')!;
    const image = (name: string) =>
      (find(dev, 'StatefulSet', name) as Workload).spec.template.spec.containers[0]!.image;
    expect(image('redis')).toBe(compose.services.redis?.image);
    expect(image('nats')).toBe(compose.services['nats-1']?.image);
  });

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
    for (const e of nats.spec.template.spec.containers[0]!.env ?? []) {
      const ref = e.valueFrom?.secretKeyRef;
      if (ref !== undefined) env[e.name] = Buffer.from(secret[ref.key]!, 'base64').toString();
    }
    const dir = mkdtempSync(join(tmpdir(), 'fairway-k8s-nats-'));
    try {
      writeFileSync(join(dir, 'nats-server.conf'), conf);
      // The container's own command line, config path swapped for the rendered file: nats-server -t
      // refuses an unknown flag or a bad value as it would at start.
      const args = (nats.spec.template.spec.containers[0]!.args ?? []).map((a) =>
        a === '/etc/nats/nats-server.conf'
          ? join(dir, 'nats-server.conf')
          : a.replace('$(POD_NAME)', 'nats-0'),
      );
      const out = execFileSync('nats-server', [...args, '-t'], {
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

  it("dev's NATS is a three-server cluster: routes to every server, JetStream stored per server, clients given every server", () => {
    const dev = renders.get('dev')!;
    const nats = find(dev, 'StatefulSet', 'nats') as Workload;
    const c = nats.spec.template.spec.containers[0]!;
    const args = c.args ?? [];
    expect(nats.spec.replicas).toBe(3);
    const pods = [0, 1, 2].map((i) => `nats-${i}.${nats.spec.serviceName}`);
    const svc = find(dev, 'Service', nats.spec.serviceName!)!.spec as {
      clusterIP?: string;
      publishNotReadyAddresses?: boolean;
      ports: { name: string; port: number }[];
    };
    // Per-pod DNS names, published before the pods are ready (the servers find each other first).
    expect(svc).toMatchObject({ clusterIP: 'None', publishNotReadyAddresses: true });
    const clusterPort = new URL(flag(args, '--cluster')!).port;
    expect(svc.ports.map((p) => String(p.port))).toContain(clusterPort);
    const routes = flag(args, '--routes')!
      .split(',')
      .map((u) => new URL(u));
    expect(routes.map((u) => u.hostname).sort()).toEqual(pods);
    expect(routes.every((u) => u.port === clusterPort)).toBe(true);
    expect(flag(args, '--server_name')).toBe('$(POD_NAME)');
    expect(c.env?.find((e) => e.name === 'POD_NAME')).toMatchObject({
      valueFrom: { fieldRef: { fieldPath: 'metadata.name' } },
    });
    expect(flag(args, '--cluster_name')).toBeDefined();
    // JetStream's store on a volume of each server's own (-sd), not one shared by the three.
    const store = flag(args, '-sd');
    const mount = (c as Container & { volumeMounts: Mount[] }).volumeMounts.find(
      (m) => m.mountPath === store,
    );
    expect(nats.spec.volumeClaimTemplates?.map((t) => t.metadata.name)).toContain(mount?.name);
    // Every fairway process on NATS is given every server.
    for (const w of workloads(dev))
      for (const container of w.spec.template.spec.containers) {
        const env = containerEnv(dev, container);
        if (env.NATS_USER === undefined) continue;
        const urls = env.NATS_URL!.split(',').map((u) => new URL(u));
        expect(urls.map((u) => u.hostname).sort(), container.name).toEqual(pods);
      }
    expect(find(dev, 'PodDisruptionBudget', 'nats')?.spec).toMatchObject({ maxUnavailable: 1 });
  });

  it("dev's NATS servers, started with the StatefulSet's command line and config, form one cluster with JetStream", async () => {
    const dev = renders.get('dev')!;
    const nats = find(dev, 'StatefulSet', 'nats') as Workload;
    const container = nats.spec.template.spec.containers[0]!;
    const conf = (find(dev, 'ConfigMap', 'nats-config')!.data as Record<string, string>)['nats-server.conf']!;
    const secret = find(dev, 'Secret', 'fairway-credentials')?.data as Record<string, string>;
    const env: Record<string, string> = {};
    for (const e of container.env ?? []) {
      const ref = e.valueFrom?.secretKeyRef;
      if (ref !== undefined) env[e.name] = Buffer.from(secret[ref.key]!, 'base64').toString();
    }
    const replicas = nats.spec.replicas ?? 1;
    // Each pod on this machine: its DNS name is 127.0.0.1, its ports free ones.
    const ports = await Promise.all(
      Array.from({ length: replicas }, async () => ({
        client: await freePort(),
        cluster: await freePort(),
        monitor: await freePort(),
      })),
    );
    const dir = mkdtempSync(join(tmpdir(), 'fairway-k8s-nats-cluster-'));
    const servers: ChildProcess[] = [];
    try {
      writeFileSync(join(dir, 'nats-server.conf'), conf);
      const podUrl = (url: string): string => {
        const u = new URL(url);
        const i = Number(/^nats-(\d+)\./.exec(u.hostname)?.[1]);
        return `nats://127.0.0.1:${ports[i]!.cluster}`;
      };
      for (let i = 0; i < replicas; i++) {
        const args = (container.args ?? []).map((a, k, all) => {
          const flagName = all[k - 1];
          if (a === '/etc/nats/nats-server.conf') return join(dir, 'nats-server.conf');
          if (flagName === '-sd') return join(dir, `data-${i}`);
          if (flagName === '-m') return String(ports[i]!.monitor);
          if (flagName === '--cluster') return `nats://127.0.0.1:${ports[i]!.cluster}`;
          if (flagName === '--routes') return a.split(',').map(podUrl).join(',');
          return a.replace('$(POD_NAME)', `nats-${i}`);
        });
        servers.push(
          spawn('nats-server', [...args, '-p', String(ports[i]!.client)], {
            env: { ...process.env, PATH: `${process.env.PATH}:/usr/sbin`, ...env },
            stdio: 'ignore',
          }),
        );
      }
      const monitor = async (i: number, path: string) =>
        fetch(`http://127.0.0.1:${ports[i]!.monitor}${path}`).catch(() => undefined);
      const deadline = Date.now() + 30_000;
      for (let i = 0; i < replicas; i++)
        for (;;) {
          // Ready as the readiness probe asks: JetStream up, which needs the cluster's meta leader.
          const res = await monitor(i, '/healthz?js-enabled-only=true');
          if (res?.status === 200) break;
          if (Date.now() > deadline) throw new Error(`nats-${i} never became ready`);
          await new Promise((r) => setTimeout(r, 200));
        }
      // Routes and the JetStream meta group may settle after the first readiness: wait for them.
      const cluster = async () => {
        const views = [];
        for (let i = 0; i < replicas; i++) {
          const routez = (await (await monitor(i, '/routez'))?.json()) as { num_routes: number } | undefined;
          const varz = (await (await monitor(i, '/varz'))?.json()) as
            | { server_name: string; cluster: { name?: string } }
            | undefined;
          const jsz = (await (await monitor(i, '/jsz'))?.json()) as
            | { meta_cluster?: { cluster_size: number; leader?: string } }
            | undefined;
          views.push({
            name: varz?.server_name,
            cluster: varz?.cluster.name,
            routes: routez?.num_routes ?? 0,
            size: jsz?.meta_cluster?.cluster_size,
            leader: jsz?.meta_cluster?.leader !== undefined && jsz.meta_cluster.leader !== '',
          });
        }
        return views;
      };
      let views = await cluster();
      while (!views.every((v) => v.routes >= replicas - 1 && v.size === replicas && v.leader)) {
        if (Date.now() > deadline) break;
        await new Promise((r) => setTimeout(r, 200));
        views = await cluster();
      }
      expect(views).toEqual(
        Array.from({ length: replicas }, (_, i) => ({
          name: `nats-${i}`,
          cluster: flag(container.args ?? [], '--cluster_name'),
          routes: expect.toSatisfy((n: number) => n >= replicas - 1),
          size: replicas,
          leader: true,
        })),
      );
    } finally {
      for (const server of servers) server.kill();
      await Promise.all(
        servers.map(
          (server) => new Promise((r) => (server.exitCode === null ? server.once('exit', r) : r(undefined))),
        ),
      );
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('production: HTTPS through an Ingress with a TLS Secret to the dispatchers’ Service', () => {
    const prod = renders.get('production')!;
    const ingresses = prod.filter((o) => o.kind === 'Ingress');
    expect(ingresses).toHaveLength(1);
    const spec = ingresses[0]!.spec as {
      tls: { hosts: string[]; secretName: string }[];
      rules: {
        host: string;
        http: { paths: { path: string; backend: { service: { name: string; port: { name: string } } } }[] };
      }[];
    };
    const tlsHosts = spec.tls.flatMap((t) => t.hosts);
    for (const rule of spec.rules) {
      expect(tlsHosts, `${rule.host} is served with TLS`).toContain(rule.host);
      for (const { backend } of rule.http.paths) {
        const svc = find(prod, 'Service', backend.service.name)?.spec as { ports: { name: string }[] };
        expect(svc.ports.map((p) => p.name)).toContain(backend.service.port.name);
      }
    }
    expect(spec.tls.every((t) => t.secretName.length > 0)).toBe(true);
  });

  it('production: the Redis password from a Secret in the URL the dispatchers connect with; the admin token from a Secret', () => {
    const prod = renders.get('production')!;
    const d = find(prod, 'Deployment', 'fairway-dispatcher') as Workload;
    const c = d.spec.template.spec.containers[0]! as Container & { volumeMounts: Mount[] };
    const env = containerEnv(prod, c);
    const redis = new URL(env.REDIS_URL!);
    expect(redis.protocol).toBe('rediss:');
    expect(redis.password).toBe('secret-fairway-credentials-redis-password');
    expect(serveEnvSchema.safeParse(env).error).toBeUndefined();
    // The admin token file lies in a volume from a Secret.
    const file = env.FAIRWAY_ADMIN_TOKEN_FILE!;
    const mount = c.volumeMounts.find((m) => file.startsWith(`${m.mountPath}/`));
    const volume = d.spec.template.spec.volumes?.find((v) => v.name === mount?.name);
    expect(volume?.secret?.secretName).toBe('fairway-admin-token');
  });

  it('production: every Secret and key the overlay needs is in the commands its kustomization.yaml gives', () => {
    const prod = renders.get('production')!;
    const howto = readFileSync(join(K8S, 'overlays/production/kustomization.yaml'), 'utf8');
    for (const ref of references(prod)) {
      const name = ref.id.split('/')[2]!;
      if (find(prod, 'Secret', name) !== undefined || ref.id.startsWith('ConfigMap/')) continue;
      if (name === 'fairway-tls') {
        expect(howto).toContain('fairway-tls');
        continue;
      }
      const command = howto.slice(howto.indexOf(`create secret generic ${name}`));
      expect(command.length, `a command that creates ${name}`).toBeLessThan(howto.length);
      if (ref.key !== undefined)
        expect(command.split('\n#   kubectl')[0], `${name} gets ${ref.key}`).toMatch(
          new RegExp(`--from-(literal|file)=${ref.key}[=\\s]`),
        );
    }
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
