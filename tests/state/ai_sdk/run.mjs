// The Vercel AI SDK's default OpenAI provider (Responses API, store left at its default: true)
// running a tool loop through the gateway: generateText, then streamText. The model writes text
// before it calls the tool, so step 2 refers to that message by item_reference.
// Usage: MODELGATE_BASE_URL=http://127.0.0.1:PORT MODELGATE_KEY=sk-cs4-... node run.mjs MODEL
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, stepCountIs, streamText, tool } from "ai";
import { z } from "zod";

const model = process.argv[2];
const openai = createOpenAI({ baseURL: `${process.env.MODELGATE_BASE_URL}/v1`, apiKey: process.env.MODELGATE_KEY });
const calls = [];
const tools = {
  get_weather: tool({
    description: "The weather in a city",
    inputSchema: z.object({ city: z.string() }),
    execute: async ({ city }) => {
      calls.push(city);
      return `Sunny in ${city}`;
    },
  }),
};
const prompt = "What is the weather in Paris? Use get_weather.";

function summary(result, steps) {
  return {
    text: result.text,
    steps: steps.length,
    toolCalls: steps.flatMap((s) => s.toolCalls.map((c) => c.toolName)),
    toolResults: steps.flatMap((s) => s.toolResults.map((r) => r.output)),
    responseIds: steps.map((s) => s.response.id),
  };
}

const generated = await generateText({ model: openai(model), prompt, tools, stopWhen: stepCountIs(4) });
const out = { generate: summary(generated, generated.steps) };

const streamed = streamText({
  model: openai(model),
  prompt,
  tools,
  stopWhen: stepCountIs(4),
  onError: ({ error }) => {
    out.streamError = String(error?.message ?? error);
  },
});
let text = "";
for await (const delta of streamed.textStream) text += delta;
const steps = await streamed.steps;
out.stream = { ...summary({ text: await streamed.text }, steps), deltas: text };
out.executed = calls;
console.log(JSON.stringify(out));
