// Drives @anthropic-ai/sdk's messages.stream().finalMessage() against the proxy; prints it as JSON.
// usage: node anthropic_client.mjs <baseURL> <prompt> [toolsJSON]
import Anthropic from "@anthropic-ai/sdk";

const [baseURL, prompt, toolsJSON] = process.argv.slice(2);
const client = new Anthropic({ baseURL, apiKey: "unused", maxRetries: 0 });
const tools = toolsJSON ? JSON.parse(toolsJSON) : undefined;

try {
  const stream = client.messages.stream({
    model: "claude-test",
    max_tokens: 1024,
    messages: [{ role: "user", content: prompt }],
    ...(tools ? { tools } : {}),
  });
  const final = await stream.finalMessage();
  process.stdout.write(JSON.stringify({ ok: true, final }));
} catch (error) {
  process.stdout.write(JSON.stringify({ ok: false, error: String(error?.message ?? error), status: error?.status ?? null }));
  process.exitCode = 1;
}
