import { useEffect, useState } from "react";
import { api, type Schemas } from "../../api/client";
import { Help } from "../../components/Help";
import { Outcome, useAction, useLoad } from "../../components/Load";
import { SectionHead } from "../../components/SectionHead";
import { Notice } from "../../components/States";

type SmtpWrite = Schemas["SmtpWrite"];

export function SmtpSection() {
  const saved = useLoad(() => api("get", "/api/settings/smtp"));
  const { outcome, run } = useAction(saved.reload);
  const [draft, setDraft] = useState<SmtpWrite | null>(null);
  const [to, setTo] = useState("");

  useEffect(() => {
    const s = saved.data;
    if (s) {
      setDraft({
        host: s.host,
        port: s.port,
        username: s.username,
        password: "",
        from: s.from,
        enabled: s.enabled,
      });
    }
  }, [saved.data]);

  if (saved.error)
    return <Notice kind="error" text={`SMTP settings could not be read: ${saved.error}`} />;
  if (!draft || !saved.data) return <Notice kind="loading" text="Loading SMTP settings…" />;
  const text = (key: "host" | "username" | "from", label: string, type = "text") => (
    <label>
      {label}
      <input
        type={type}
        value={draft[key] ?? ""}
        onChange={(e) => setDraft({ ...draft, [key]: e.target.value })}
      />
    </label>
  );
  return (
    <>
      <SectionHead title="SMTP">
        The mail relay Zilean sends invites and email notifications through. settings:smtp shows and
        changes it. The password is write-only: leave it blank to keep the stored one. Changes are
        audited with the password masked.
      </SectionHead>
      <Outcome text={outcome} />
      <form
        className="stack card-inline"
        aria-label="SMTP settings"
        onSubmit={(e) => {
          e.preventDefault();
          void run(() => api("put", "/api/settings/smtp", { body: draft }), "SMTP settings saved.");
        }}
      >
        <label className="choice">
          <input
            type="checkbox"
            checked={draft.enabled ?? false}
            onChange={(e) => setDraft({ ...draft, enabled: e.target.checked })}
          />
          Send email
        </label>
        {text("host", "Host")}
        <label>
          Port
          <input
            type="number"
            min={1}
            max={65535}
            value={draft.port ?? 587}
            onChange={(e) => setDraft({ ...draft, port: Number(e.target.value) })}
          />
        </label>
        {text("username", "Username")}
        <label>
          Password
          <input
            type="password"
            autoComplete="new-password"
            value={draft.password ?? ""}
            placeholder={saved.data.has_password ? "stored; leave empty to keep it" : "none stored"}
            onChange={(e) => setDraft({ ...draft, password: e.target.value })}
          />
        </label>
        {text("from", "From address", "email")}
        <p className="muted">
          Port 465 uses TLS from the start; other ports upgrade with STARTTLS when offered.
        </p>
        <div className="row">
          <button type="submit">Save SMTP settings</button>
        </div>
      </form>
      <form
        className="row"
        aria-label="SMTP test"
        onSubmit={(e) => {
          e.preventDefault();
          void run(
            () => api("post", "/api/settings/smtp/test", { body: { to, draft } }),
            `A test message was sent to ${to}.`,
          );
        }}
      >
        <label>
          Send a test to
          <input type="email" value={to} onChange={(e) => setTo(e.target.value)} required />
        </label>
        <button type="submit" className="secondary">
          Send test
        </button>
        <Help topic="the SMTP test">
          Sends one message with the settings in the form above, saved or not. Nothing is saved by a
          test.
        </Help>
      </form>
    </>
  );
}
