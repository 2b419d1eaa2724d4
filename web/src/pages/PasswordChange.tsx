import { useState } from "react";
import { api } from "../api/client";
import { errorText } from "../components/States";
import { useSession } from "../session";

/** The screen a user with a temporary password sees until they choose their own. */
export function PasswordChange() {
  const { me, refresh } = useSession();
  return (
    <main className="card">
      <h1>Choose a new password</h1>
      <p role="alert" className="warning">
        {me.email} is using a temporary password. Choose your own to continue.
      </p>
      <PasswordForm onDone={refresh} />
    </main>
  );
}

/** Current password, new password twice; a change ends the user's other sessions. */
export function PasswordForm(props: { onDone: () => Promise<void> }) {
  const { me } = useSession();
  const [current, setCurrent] = useState("");
  const [next, setNext] = useState("");
  const [repeat, setRepeat] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  async function submit(event: React.FormEvent) {
    event.preventDefault();
    if (next !== repeat) {
      setError("The new passwords do not match.");
      return;
    }
    setBusy(true);
    try {
      await api("post", "/api/account/change-password", {
        body: { current_password: current, new_password: next },
      });
      await props.onDone();
      setCurrent("");
      setNext("");
      setRepeat("");
      setError(null);
    } catch (failure) {
      setError(errorText(failure));
    } finally {
      setBusy(false);
    }
  }

  return (
    <form onSubmit={submit} className="stack" aria-label="Change password">
      <input type="email" value={me.email} autoComplete="username" hidden readOnly />
      <label>
        Current password
        <input
          type="password"
          autoComplete="current-password"
          value={current}
          onChange={(e) => setCurrent(e.target.value)}
          required
        />
      </label>
      <label>
        New password
        <input
          type="password"
          autoComplete="new-password"
          minLength={8}
          value={next}
          onChange={(e) => setNext(e.target.value)}
          required
        />
      </label>
      <label>
        Repeat new password
        <input
          type="password"
          autoComplete="new-password"
          minLength={8}
          value={repeat}
          onChange={(e) => setRepeat(e.target.value)}
          required
        />
      </label>
      {error && (
        <p className="error" role="alert">
          {error}
        </p>
      )}
      <button type="submit" disabled={busy}>
        Change password
      </button>
    </form>
  );
}
