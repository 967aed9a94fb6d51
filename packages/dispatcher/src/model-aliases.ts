import type { AnswerShape } from './answer-shape.ts';
import type { ApiError } from './errors.ts';

/**
 * The config's model aliases (`models.aliases`): exact names and `*` patterns, each standing for a
 * model a pool serves. A model something serves is never read as an alias.
 */
export class ModelAliases {
  readonly #exact = new Map<string, string>();
  /** Patterns, most specific first (most characters besides `*`; then config order). */
  readonly #patterns: { readonly re: RegExp; readonly target: string }[] = [];

  constructor(aliases: Readonly<Record<string, string>>) {
    const patterns: { re: RegExp; target: string; weight: number }[] = [];
    for (const [alias, target] of Object.entries(aliases)) {
      if (!alias.includes('*')) {
        this.#exact.set(alias, target);
        continue;
      }
      const body = alias
        .split('*')
        .map((part) => part.replace(/[.+?^${}()|[\]\\]/g, '\\$&'))
        .join('.*');
      patterns.push({ re: new RegExp(`^${body}$`, 's'), target, weight: alias.replaceAll('*', '').length });
    }
    // Array.prototype.sort is stable: equal weights keep their config order.
    patterns.sort((a, b) => b.weight - a.weight);
    this.#patterns.push(...patterns);
  }

  /** The model `asked` stands for, or undefined when it is no alias (or names a served model). */
  resolve(asked: string, served: (model: string) => boolean): string | undefined {
    if (served(asked)) return undefined;
    const exact = this.#exact.get(asked);
    if (exact !== undefined) return exact;
    for (const p of this.#patterns) if (p.re.test(asked)) return p.target;
    return undefined;
  }

  /** The exact aliases whose model is served (what `/v1/models` lists beside the models). */
  listed(served: (model: string) => boolean): string[] {
    return [...this.#exact].filter(([, target]) => served(target)).map(([alias]) => alias);
  }
}

/**
 * An answer to a request for an alias, with the name the client asked for where the engine wrote
 * its model's (`"model":"<served>"`, in a JSON body or in every SSE event). Streamed bytes are
 * passed on by whole lines, so a name split between two network chunks is still found.
 */
export class AliasedAnswer implements AnswerShape {
  readonly #from: string;
  readonly #to: string;
  readonly #decoder = new TextDecoder();
  #pending = '';

  constructor(served: string, asked: string) {
    this.#from = `"model":${JSON.stringify(served)}`;
    this.#to = `"model":${JSON.stringify(asked)}`;
  }

  whole(bytes: Uint8Array | string): string {
    const text = typeof bytes === 'string' ? bytes : this.#decoder.decode(bytes);
    return text.replaceAll(this.#from, this.#to);
  }

  chunk(bytes: Uint8Array | string): string {
    const text =
      this.#pending + (typeof bytes === 'string' ? bytes : this.#decoder.decode(bytes, { stream: true }));
    const end = text.lastIndexOf('\n') + 1;
    this.#pending = text.slice(end);
    return text.slice(0, end).replaceAll(this.#from, this.#to);
  }

  error(err: ApiError): string {
    return `data: ${JSON.stringify(err.body())}\n\n`;
  }
}
