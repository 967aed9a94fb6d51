import type { Reporter, TestModule } from 'vitest/node';

/**
 * Prints `N passed, N failed` as the run's last line so CI can see a run that executed nothing.
 * Counts on `onTestRunEnd`, prints on `onFinished`, which runs after the default reporter's summary.
 */
export default class SummaryReporter implements Reporter {
  #line = '0 passed, 0 failed';

  onTestRunEnd(testModules: ReadonlyArray<TestModule>): void {
    let passed = 0;
    let failed = 0;
    let skipped = 0;
    for (const mod of testModules) {
      const tests = [...mod.children.allTests()];
      for (const test of tests) {
        const state = test.result().state;
        if (state === 'passed') passed++;
        else if (state === 'failed') failed++;
        else skipped++;
      }
      // A file that failed to load, or whose setup (beforeAll) failed and skipped every test, has
      // no failed test but must still count as a failure.
      if (mod.state() === 'failed' && !tests.some((t) => t.result().state === 'failed')) failed++;
    }
    this.#line = `${passed} passed, ${failed} failed, ${skipped} skipped`;
  }

  onFinished(): void {
    process.stdout.write(`\n${this.#line}\n`);
  }
}
