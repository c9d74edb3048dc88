// Drives openai-node's stream helpers against the proxy; prints the final object as JSON.
// usage: node node_client.mjs <baseURL> <chat|responses|responses-create> <prompt> [toolsJSON] [includeUsage] [model]
// responses-create iterates responses.create({stream: true}) and reports the event types and the
// terminal event's response.
import OpenAI from "openai";

const [baseURL, dialect, prompt, toolsJSON, includeUsage, modelArg] = process.argv.slice(2);
const model = modelArg || "m";
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0 });
const tools = toolsJSON ? JSON.parse(toolsJSON) : undefined;

try {
  let final;
  if (dialect === "chat") {
    const stream = client.chat.completions.stream({
      model,
      messages: [{ role: "user", content: prompt }],
      ...(tools ? { tools } : {}),
      ...(includeUsage === "usage" ? { stream_options: { include_usage: true } } : {}),
    });
    final = await stream.finalChatCompletion();
  } else if (dialect === "responses-create") {
    const stream = await client.responses.create({ model, input: prompt, stream: true, ...(tools ? { tools } : {}) });
    const types = [];
    for await (const event of stream) {
      types.push(event.type);
      if (event.response && event.type !== "response.created" && event.type !== "response.in_progress") final = event.response;
    }
    final = { ...final, eventTypes: types };
  } else {
    const stream = client.responses.stream({ model, input: prompt, ...(tools ? { tools } : {}) });
    final = await stream.finalResponse();
  }
  process.stdout.write(JSON.stringify({ ok: true, final }));
} catch (error) {
  process.stdout.write(JSON.stringify({ ok: false, error: String(error?.message ?? error), status: error?.status ?? null }));
  process.exitCode = 1;
}
