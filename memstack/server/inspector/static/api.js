// The memstack HTTP API as the inspector uses it: one key, one tenant, JSON in and out.
// Every call sends the key in the Authorization header, as any other client does.

export class ApiError extends Error {
  constructor(status, detail) {
    super(`${status}: ${typeof detail === "string" ? detail : JSON.stringify(detail)}`);
    this.status = status;
    this.detail = detail;
  }
}

export class Api {
  constructor(key, tenant = null) {
    this.key = key;
    this.tenant = tenant;
  }

  headers(extra = {}) {
    return { Authorization: `Bearer ${this.key}`, ...extra };
  }

  async request(method, path, { params = {}, body } = {}) {
    const url = new URL(path, window.location.origin);
    for (const [name, value] of Object.entries(params)) {
      if (value === undefined || value === null || value === "") continue;
      for (const one of Array.isArray(value) ? value : [value]) url.searchParams.append(name, one);
    }
    const init = { method, headers: this.headers() };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(url, init);
    const text = await response.text();
    const data = text ? JSON.parse(text) : null;
    if (!response.ok) throw new ApiError(response.status, data && data.detail !== undefined ? data.detail : text);
    return data;
  }

  tenantPath(rest) {
    return `/v1/tenants/${encodeURIComponent(this.tenant)}/${rest}`;
  }

  whoami() { return this.request("GET", "/v1/key"); }
  health() { return this.request("GET", "/healthz"); }
  subjects(after) { return this.request("GET", this.tenantPath("subjects"), { params: { after } }); }
  history(subject, known, after) {
    return this.request("GET", this.tenantPath("history"), { params: { subject, known, after } });
  }
  facts(subject, valid, known, after) {
    return this.request("GET", this.tenantPath("facts"), { params: { subject, valid, known, after } });
  }
  records(params) { return this.request("GET", this.tenantPath("records"), { params }); }
  sessionState(session) {
    return this.request("GET", this.tenantPath(`sessions/${encodeURIComponent(session)}/state`));
  }
  search(text, mode, k, after) {
    return this.request("GET", this.tenantPath("search"), { params: { text, mode, k, after } });
  }
  provenance(eventId, after) {
    return this.request("GET", this.tenantPath(`events/${encodeURIComponent(eventId)}`), { params: { after } });
  }
  write(events) { return this.request("POST", this.tenantPath("events"), { body: { events } }); }
  forget(scope, reason) { return this.request("POST", this.tenantPath("forget"), { body: { scope, reason } }); }
  forgetStatus(requestId) {
    return this.request("GET", this.tenantPath(`forget/${encodeURIComponent(requestId)}`));
  }

  // The change feed (server-sent events). EventSource cannot send an Authorization header,
  // so the stream is read with fetch and parsed here. Calls onChange(change) per event.
  async follow(onChange, signal) {
    const response = await fetch(this.tenantPath("changes"), { headers: this.headers(), signal });
    if (!response.ok) throw new ApiError(response.status, await response.text());
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = block.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
        if (data) onChange(JSON.parse(data));
      }
    }
  }
}

// A canonical lower-case UUIDv7 (what the event schema requires of event ids).
export function uuid7() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  let ms = Date.now();
  for (let i = 5; i >= 0; i--) { bytes[i] = ms % 256; ms = Math.floor(ms / 256); }
  bytes[6] = 0x70 | (bytes[6] & 0x0f);
  bytes[8] = 0x80 | (bytes[8] & 0x3f);
  const hex = [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

// The documented retraction event (schemas/event.v1.json, kind fact_retracted).
export function retraction(tenant, subject, relation, object, validFrom) {
  const now = new Date().toISOString();
  const event = {
    event_id: uuid7(), tenant, agent: "inspector", session: "inspector", subject,
    kind: "fact_retracted", occurred_at: now,
    provenance: { source: "memstack-inspector", authority: "user" },
    payload: { relation, object },
  };
  if (validFrom) event.valid_from = validFrom;
  return event;
}
