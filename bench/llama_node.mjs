// bench/llama_node.mjs — llama.cpp through node-llama-cpp's prebuilt CPU
// libraries: prefill tok/s of a P-token prompt and decode tok/s of N tokens,
// the same measurement `pagoda run` reports. One JSON line per repetition.
//
//   node bench/llama_node.mjs MODULE_DIR MODEL.gguf THREADS PROMPT_TOKENS GEN_TOKENS [REPS [N_VOCAB]]
//
// MODULE_DIR is the node_modules folder holding node-llama-cpp. Prompts are
// random token ids (ids 3.. of the vocabulary), as pagoda-bench's.
import path from "node:path";
import { pathToFileURL } from "node:url";

const [moduleDir, modelPath, threadsArg, ppArg, tgArg, repsArg, vocabArg] = process.argv.slice(2);
if (!moduleDir || !modelPath) {
    console.error("usage: node llama_node.mjs MODULE_DIR MODEL.gguf THREADS PROMPT_TOKENS GEN_TOKENS [REPS [N_VOCAB]]");
    process.exit(2);
}
const threads = Number(threadsArg ?? 2), pp = Number(ppArg ?? 512), tg = Number(tgArg ?? 128);
const reps = Number(repsArg ?? 1);
const entry = pathToFileURL(path.join(moduleDir, "node-llama-cpp", "dist", "index.js")).href;
const { getLlama, LlamaLogLevel } = await import(entry);

const llama = await getLlama({ gpu: false, build: "never", maxThreads: threads, logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath, gpuLayers: 0, useMmap: true });
let seed = 12345;
const rnd = () => { seed = (seed * 1103515245 + 12345) >>> 0; return seed; };
const nVocab = Number(vocabArg ?? 32000); // the model's vocabulary size (pagoda info)

for (let r = 0; r < reps; r++) {
    const ctx = await model.createContext({ contextSize: pp + tg + 64, batchSize: Math.min(512, pp), threads: { ideal: threads, min: threads }, sequences: 1 });
    const seq = ctx.getSequence();
    const prompt = Array.from({ length: pp }, () => 3 + (rnd() % (nVocab - 3)));
    let t0 = process.hrtime.bigint();
    await seq.evaluateWithoutGeneratingNewTokens(prompt);
    const ppS = Number(process.hrtime.bigint() - t0) / 1e9;
    await seq.clearHistory();
    // Decode: a 1-token prompt, then tg tokens; time from the first token to the last.
    let n = 0, tFirst = 0n, tLast = 0n;
    for await (const tok of seq.evaluate([3 + (rnd() % (nVocab - 3))], { temperature: 0 })) {
        void tok;
        const t = process.hrtime.bigint();
        if (n === 0) tFirst = t;
        tLast = t;
        if (++n >= tg + 1) break;
    }
    const tgS = Number(tLast - tFirst) / 1e9;
    console.log(JSON.stringify({ engine: "llama.cpp-node", threads, pp, tg, pp_tok_s: pp / ppS, tg_tok_s: (n - 1) / tgS, cpu: llama.cpuMathCores }));
    await ctx.dispose();
}
await model.dispose();
await llama.dispose();
