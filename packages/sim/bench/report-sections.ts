/**
 * Runs the sections of a report script that `--only a,b` names, in that order; an unknown name
 * fails with the known ones. A part of a slow report that runs alone is what test/reports checks.
 */
export async function runSections(
  only: string,
  sections: Readonly<Record<string, () => Promise<unknown> | unknown>>,
): Promise<void> {
  for (const name of only.split(',')) {
    const section = sections[name];
    if (section === undefined)
      throw new Error(`unknown section "${name}"; known: ${Object.keys(sections).join(', ')}`);
    await section();
  }
}
