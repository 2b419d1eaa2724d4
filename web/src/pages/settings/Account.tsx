import { useState } from "react";
import { api } from "../../api/client";
import { Confirm } from "../../components/Confirm";
import { Help } from "../../components/Help";
import { errorText } from "../../components/States";
import { SectionHead } from "../../components/SectionHead";
import { useSession } from "../../session";
import { PasswordForm } from "../PasswordChange";

export function AccountSection() {
  const { me } = useSession();
  const [changed, setChanged] = useState(false);
  const [confirming, setConfirming] = useState(false);
  const [signedOut, setSignedOut] = useState<string | null>(null);
  const signOutOthers = async () => {
    setConfirming(false);
    try {
      const { ended } = await api("post", "/api/account/sign-out-others");
      setSignedOut(
        ended === 0
          ? "You had no other sessions."
          : `Signed out ${ended} other session${ended === 1 ? "" : "s"}.`,
      );
    } catch (error) {
      setSignedOut(`Could not sign out your other sessions: ${errorText(error)}`);
    }
  };
  return (
    <>
      <SectionHead title="Account">
        Your own account: only you see this page. Changing your password, or Sign out everywhere
        else, ends every other session of yours (other browsers and devices); this one stays signed
        in.
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
        <button type="button" className="secondary" onClick={() => setConfirming(true)}>
          Sign out everywhere else
        </button>
        <Help topic="signing out everywhere">
          Ends every other session of yours (other browsers and devices) at once; this one stays
          signed in. API tokens are not sessions: revoke them under API tokens. There is nothing to
          undo: sign in again where you need to.
        </Help>
      </p>
      {signedOut && (
        <p className="notice" role="status">
          {signedOut}
        </p>
      )}
      <p>
        To sign out of this browser, use the <a href="/account">account page</a> (a form with its
        own protection against cross-site requests).
      </p>
      {confirming && (
        <Confirm
          text="Sign out every other browser and device signed in as you?"
          action="Sign out other sessions"
          onConfirm={() => void signOutOthers()}
          onCancel={() => setConfirming(false)}
        />
      )}
    </>
  );
}
