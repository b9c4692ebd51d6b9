// load.mjs: load a GGUF model with llama.cpp through node-llama-cpp on the
// CPU and produce one token, printing the phases' times as one JSON line.
//
// Usage (from a directory where `npm install node-llama-cpp@3.22.1` ran):
//   node load.mjs MODEL.gguf mmap|nommap
// "load_ms" ends when loadModel returns; "first_token_ms" when the first
// token has been generated (with mmap, that is when the weights have
// really been read).
import { getLlama } from "node-llama-cpp";

const [modelPath, mode] = process.argv.slice(2);
if (!modelPath || (mode !== "mmap" && mode !== "nommap")) {
	console.error("usage: node load.mjs MODEL.gguf mmap|nommap");
	process.exit(2);
}
const t0 = performance.now();
const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
const t1 = performance.now();
const model = await llama.loadModel({ modelPath, useMmap: mode === "mmap", gpuLayers: 0 });
const t2 = performance.now();
const context = await model.createContext({ contextSize: 64, batchSize: 8, threads: 0 });
const sequence = context.getSequence();
const tokens = model.tokenize("hi");
let token = null;
for await (const t of sequence.evaluate(tokens, { temperature: 0 })) {
	token = t;
	break;
}
const t3 = performance.now();
console.log(JSON.stringify({
	model: modelPath, mmap: mode === "mmap", tokens_in: tokens.length, token,
	text: model.detokenize([token]),
	library_ms: t1 - t0, load_ms: t2 - t1, first_token_ms: t3 - t1,
}));
await context.dispose();
await model.dispose();
await llama.dispose();
