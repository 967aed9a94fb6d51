import { MemoryStore } from '../src/index.ts';
import { describeStoreConformance } from './conformance.ts';

describeStoreConformance('memory', async () => {
  const store = new MemoryStore();
  return { store, dispose: () => store.close() };
});
