// Drives openai-node's stream helpers against the proxy; prints the final object as JSON.
// usage: node node_client.mjs <baseURL> <chat|responses> <prompt> [toolsJSON] [includeUsage]
import OpenAI from "openai";

const [baseURL, dialect, prompt, toolsJSON, includeUsage] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0 });
const tools = toolsJSON ? JSON.parse(toolsJSON) : undefined;

try {
  let final;
  if (dialect === "chat") {
    const stream = client.chat.completions.stream({
      model: "m",
      messages: [{ role: "user", content: prompt }],
      ...(tools ? { tools } : {}),
      ...(includeUsage === "usage" ? { stream_options: { include_usage: true } } : {}),
    });
    final = await stream.finalChatCompletion();
  } else {
    const stream = client.responses.stream({ model: "m", input: prompt, ...(tools ? { tools } : {}) });
    final = await stream.finalResponse();
  }
  process.stdout.write(JSON.stringify({ ok: true, final }));
} catch (error) {
  process.stdout.write(JSON.stringify({ ok: false, error: String(error?.message ?? error), status: error?.status ?? null }));
  process.exitCode = 1;
}
