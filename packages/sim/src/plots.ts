/**
 * SVG plots of a run, like the VTC paper's figures: service rate per tenant over time (Figures
 * 3b–10), the absolute difference in accumulated service over time (Figures 3a, 19) and the
 * response time (TTFT) per tenant over time (Figures 9, 12). Rendered server-side with vega-lite
 * and vega's headless view; no browser or canvas needed.
 */
import * as vega from 'vega';
import { compile, type TopLevelSpec } from 'vega-lite';
import type { SimMetrics } from './metrics.ts';

/** One rendered plot. */
export interface Plot {
  /** File name, e.g. `service-rate.svg`. */
  readonly file: string;
  readonly title: string;
  readonly svg: string;
}

type Row = { t: number; tenant: string; value: number };

function rows(t: readonly number[], byTenant: Readonly<Record<string, readonly (number | null)[]>>): Row[] {
  const out: Row[] = [];
  for (const [tenant, ys] of Object.entries(byTenant)) {
    ys.forEach((y, k) => {
      if (y !== null && y !== undefined && Number.isFinite(y)) out.push({ t: t[k]!, tenant, value: y });
    });
  }
  return out;
}

function lineSpec(title: string, yTitle: string, values: Row[], colorByTenant: boolean): TopLevelSpec {
  const lines = new Set(values.map((v) => v.tenant)).size || 1;
  return {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title,
    width: 640,
    height: 320,
    background: 'white',
    data: { values },
    mark: { type: 'line', point: values.length / lines <= 60, strokeWidth: 1.5 },
    encoding: {
      x: { field: 't', type: 'quantitative', title: 'time (s)' },
      y: { field: 'value', type: 'quantitative', title: yTitle },
      ...(colorByTenant
        ? {
            color: {
              field: 'tenant',
              type: 'nominal',
              title: 'tenant',
              sort: null,
              // Ten clearly distinct hues while they suffice; paired shades beyond.
              scale: { scheme: lines <= 10 ? 'category10' : 'tableau20' },
            },
          }
        : {}),
    },
  };
}

/** Renders one vega-lite spec to an SVG string. */
export async function renderSvg(spec: TopLevelSpec): Promise<string> {
  const compiled = compile(spec).spec;
  const view = new vega.View(vega.parse(compiled), { renderer: 'none' });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}

/** Renders the run's plots. */
export async function renderPlots(m: SimMetrics, label: string): Promise<Plot[]> {
  const s = m.series;
  const specs: { file: string; title: string; spec: TopLevelSpec }[] = [
    {
      file: 'service-rate.svg',
      title: `${label}: service rate per tenant (60 s window)`,
      spec: lineSpec(
        `${label}: service rate per tenant`,
        'service (tokens/s, input + 2·output)',
        rows(s.t, s.serviceRate),
        true,
      ),
    },
    {
      file: 'accumulated-service-diff.svg',
      title: `${label}: absolute difference in accumulated service`,
      spec: lineSpec(
        `${label}: max − min accumulated service across tenants`,
        'absolute difference in service',
        rows(s.t, { all: s.accumulatedDiff }),
        false,
      ),
    },
    {
      file: 'accumulated-service.svg',
      title: `${label}: accumulated service per tenant`,
      spec: lineSpec(
        `${label}: accumulated service per tenant`,
        'accumulated service (input + 2·output)',
        rows(s.t, s.accumulatedService),
        true,
      ),
    },
    {
      file: 'ttft.svg',
      title: `${label}: response time (TTFT) per tenant`,
      spec: lineSpec(
        `${label}: response time per tenant`,
        'mean TTFT (s), 60 s window',
        rows(s.t, s.ttft),
        true,
      ),
    },
  ];
  const out: Plot[] = [];
  for (const p of specs) out.push({ file: p.file, title: p.title, svg: await renderSvg(p.spec) });
  return out;
}
