import { useState } from "react";
import { Help } from "../../components/Help";
import { SectionHead } from "../../components/SectionHead";
import { useSession } from "../../session";
import { PasswordForm } from "../PasswordChange";

export function AccountSection() {
  const { me } = useSession();
  const [changed, setChanged] = useState(false);
  return (
    <>
      <SectionHead title="Account">
        Your own account: only you see this page. Changing your password signs out every other
        session of yours (other browsers and devices); this one stays signed in.
      </SectionHead>
      <dl className="facts">
        <dt>Email</dt>
        <dd>{me.email}</dd>
        <dt>Permissions</dt>
        <dd>
          {me.is_super_admin
            ? "Super Admin: every permission"
            : me.permissions.join(", ") || "none"}
        </dd>
      </dl>
      <h2>Change password</h2>
      {changed && (
        <p className="notice" role="status">
          Password changed; your other sessions have ended.
        </p>
      )}
      <PasswordForm onDone={async () => setChanged(true)} />
      <h2>Sign out</h2>
      <p>
        Signing out happens on the <a href="/account">account page</a> (a form with its own
        protection against cross-site requests).
        <Help topic="signing out everywhere">
          There is no separate &quot;sign out everywhere&quot; button: changing your password ends
          all your other sessions, and an administrator&apos;s password reset or disabling your
          account ends all of them.
        </Help>
      </p>
    </>
  );
}
