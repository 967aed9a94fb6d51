/**
 * Plots of a fleet plan (`fairway plan`, Aladdin Figure 11): GPUs needed for P100 SLO attainment
 * against the arrival rate, one line per placement policy; and of SLO experiments: attainment per
 * class and throughput per policy. Rendered with vega-lite through the simulator's `renderSvg`.
 */
import type { TopLevelSpec } from 'vega-lite';
import type { FleetPlan } from './plan.ts';
import { renderSvg } from './plots.ts';
import type { SloExperimentResult } from './slo-experiments.ts';

/** The vega-lite spec of GPUs needed against arrival rate, per placement. */
export function planPlotSpec(plan: FleetPlan): TopLevelSpec {
  const values: { rate: number; gpus: number; placement: string }[] = [];
  for (const p of plan.policies)
    for (const pt of p.points)
      if (pt.gpus !== undefined) values.push({ rate: pt.rate, gpus: pt.gpus, placement: p.placement });
  return {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: `GPUs for P100 SLOs (TTFT ≤ ${plan.slo.ttftS} s, ATGT ≤ ${plan.slo.atgtS * 1000} ms): ${plan.model} on ${plan.gpu} × ${plan.tp.chosen}`,
    width: 560,
    height: 320,
    background: 'white',
    data: { values },
    mark: { type: 'line', point: true, strokeWidth: 1.5 },
    encoding: {
      x: { field: 'rate', type: 'quantitative', title: 'arrival rate (requests/s)' },
      y: { field: 'gpus', type: 'quantitative', title: 'GPUs needed' },
      color: { field: 'placement', type: 'nominal', title: 'placement', scale: { scheme: 'category10' } },
    },
  };
}

/** GPUs needed against arrival rate, as SVG. */
export function renderPlanPlot(plan: FleetPlan): Promise<string> {
  return renderSvg(planPlotSpec(plan));
}

/** SLO attainment per class for each policy of an SLO experiment, as SVG (grouped bars). */
export function renderAttainmentPlot(
  title: string,
  results: readonly SloExperimentResult[],
): Promise<string> {
  const values = results.flatMap((r) =>
    r.classes
      .filter((c) => c.attainment !== undefined)
      .map((c) => ({ policy: r.policy, sloClass: c.sloClass, attainment: c.attainment as number })),
  );
  return renderSvg({
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title,
    background: 'white',
    data: { values },
    mark: 'bar',
    encoding: {
      x: { field: 'policy', type: 'nominal', title: null, sort: null },
      xOffset: { field: 'sloClass' },
      y: { field: 'attainment', type: 'quantitative', title: 'SLO attainment', scale: { domain: [0, 1] } },
      color: { field: 'sloClass', type: 'nominal', title: 'class', scale: { scheme: 'category10' } },
    },
    width: 560,
    height: 280,
  } as TopLevelSpec);
}

/** Throughput (completed requests per second) and model swaps per policy, as SVG. */
export function renderThroughputPlot(
  title: string,
  results: readonly SloExperimentResult[],
): Promise<string> {
  const values = results.map((r) => ({
    policy: r.policy,
    throughput: r.throughput.completedPerS,
    swaps: r.swaps,
  }));
  return renderSvg({
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title,
    background: 'white',
    data: { values },
    width: 560,
    height: 260,
    layer: [
      {
        mark: 'bar',
        encoding: {
          x: { field: 'policy', type: 'nominal', title: null, sort: null },
          y: { field: 'throughput', type: 'quantitative', title: 'completed requests/s' },
        },
      },
      {
        mark: { type: 'text', dy: -8 },
        encoding: {
          x: { field: 'policy', type: 'nominal', sort: null },
          y: { field: 'throughput', type: 'quantitative' },
          text: { field: 'swaps', type: 'quantitative', format: 'd', title: 'swaps' },
        },
      },
    ],
  } as TopLevelSpec);
}
