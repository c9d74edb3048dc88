// Drives openai-node through a dropped background stream and its resumption; prints JSON.
// usage: node node_background.mjs <baseURL> <prompt> <dropAfterSequence>
// Creates a background streamed response, aborts its stream after that sequence number, then
// resumes twice: responses.retrieve(id, {stream: true, starting_after}) (the server's filter)
// and responses.stream({response_id, starting_after}) (the SDK's helper), and retrieves it.
import OpenAI from "openai";

const [baseURL, prompt, dropAfterArg] = process.argv.slice(2);
const dropAfter = Number(dropAfterArg);
const client = new OpenAI({ baseURL, apiKey: "k", maxRetries: 0 });

try {
  const created = await client.responses.create({ model: "m", input: prompt, background: true, stream: true });
  let id = null;
  let last = -1;
  for await (const event of created) {
    if (event.response) id = event.response.id;
    last = event.sequence_number;
    if (last >= dropAfter) {
      created.controller.abort(); // the connection goes away mid-stream
      break;
    }
  }
  const replayed = [];
  const retrieved = await client.responses.retrieve(id, { stream: true, starting_after: last });
  for await (const event of retrieved) replayed.push(event.sequence_number);
  const helper = client.responses.stream({ response_id: id, starting_after: last });
  const resumed = [];
  for await (const event of helper) resumed.push(event.sequence_number);
  const final = await helper.finalResponse();
  const stored = await client.responses.retrieve(id);
  process.stdout.write(JSON.stringify({ ok: true, id, last, replayed, resumed, final, stored }));
} catch (error) {
  process.stdout.write(JSON.stringify({ ok: false, error: String(error?.message ?? error), status: error?.status ?? null }));
  process.exitCode = 1;
}
