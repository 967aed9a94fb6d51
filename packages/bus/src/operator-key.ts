/**
 * The operator's Ed25519 key: what makes an admin event valid. A NATS account may be allowed to
 * publish on the admin subjects, but a dispatcher applies an event only if it carries a signature
 * of a configured operator key over its exact bytes, so bus credentials alone cannot mint API keys
 * or change limits. Keys are PEM (PKCS#8 private, SPKI public) from `node:crypto`.
 */
import {
  createHash,
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  type KeyObject,
  randomBytes,
  sign,
  verify,
} from 'node:crypto';
import { BusError, BusErrorCode } from './errors.ts';
import {
  type AdminEvent,
  type AdminEventInput,
  adminEventSchema,
  type SignedAdminEnvelope,
} from './messages.ts';

/**
 * Signatures cover this prefix and then the payload, so a signature made for anything else with
 * the same key can never pass as an admin event.
 */
const SIGNING_CONTEXT = 'fairway-admin-event/v1\n';

/** A new operator key pair, both halves as PEM, and the public key's id. */
export interface OperatorKeyPair {
  readonly privateKeyPem: string;
  readonly publicKeyPem: string;
  readonly keyId: string;
}

/** The id of a public key: `ed25519:` and the first 16 hex digits of the SHA-256 of its SPKI encoding. */
export function operatorKeyId(publicKey: KeyObject): string {
  const der = publicKey.export({ type: 'spki', format: 'der' });
  return `ed25519:${createHash('sha256').update(der).digest('hex').slice(0, 16)}`;
}

/** Generates a fresh Ed25519 operator key pair. */
export function generateOperatorKeyPair(): OperatorKeyPair {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  return {
    privateKeyPem: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
    publicKeyPem: publicKey.export({ type: 'spki', format: 'pem' }).toString(),
    keyId: operatorKeyId(publicKey),
  };
}

function signedBytes(payload: string): Buffer {
  return Buffer.from(SIGNING_CONTEXT + payload, 'utf8');
}

/** Signs admin events with the operator's private key (`fairway admin --operator-key FILE`). */
export class OperatorSigner {
  readonly keyId: string;
  readonly #key: KeyObject;

  private constructor(key: KeyObject) {
    this.#key = key;
    this.keyId = operatorKeyId(createPublicKey(key));
  }

  /** Reads a PKCS#8 PEM Ed25519 private key; throws a {@link BusError} that never quotes the key. */
  static fromPem(pem: string | Buffer, source = 'operator key'): OperatorSigner {
    let key: KeyObject;
    try {
      key = createPrivateKey(pem);
    } catch {
      throw new BusError(BusErrorCode.INVALID_KEY, `${source} is not a PEM private key`);
    }
    if (key.asymmetricKeyType !== 'ed25519')
      throw new BusError(
        BusErrorCode.INVALID_KEY,
        `${source} is a ${key.asymmetricKeyType} key, not Ed25519`,
      );
    return new OperatorSigner(key);
  }

  /**
   * The signed form of `event` for the fleet whose subject prefix is `fleet`: its JSON text (with
   * the fleet and a fresh random `nonce` unless it has one) as the payload, this key's id and the
   * signature. The nonce makes each signed event unique, so a dispatcher can refuse a copy
   * re-published later; the fleet stops a copy from being applied to another fleet.
   */
  sign(
    event: AdminEventInput,
    fleet: string,
    nonce: string = randomBytes(16).toString('hex'),
  ): SignedAdminEnvelope {
    const parsed = adminEventSchema.safeParse({ ...event, fleet, nonce: event.nonce ?? nonce });
    if (!parsed.success)
      throw new BusError(
        BusErrorCode.INVALID_MESSAGE,
        `cannot sign an invalid admin event: ${parsed.error.message}`,
      );
    const payload = JSON.stringify(parsed.data);
    const sig = sign(null, signedBytes(payload), this.#key).toString('base64');
    return { payload, keyId: this.keyId, sig };
  }
}

/** Why an admin event's signature was refused, or whose key made it. */
export type SignatureCheck =
  | { readonly ok: true; readonly keyId: string }
  | { readonly ok: false; readonly reason: string };

/** Checks admin-event signatures against the operator public keys a dispatcher trusts. */
export class OperatorVerifier {
  readonly #keys: ReadonlyMap<string, KeyObject>;

  private constructor(keys: ReadonlyMap<string, KeyObject>) {
    this.#keys = keys;
  }

  /** Reads SPKI PEM Ed25519 public keys; `sources` name them in errors. */
  static fromPems(pems: readonly (string | Buffer)[], sources: readonly string[] = []): OperatorVerifier {
    const keys = new Map<string, KeyObject>();
    pems.forEach((pem, i) => {
      const source = sources[i] ?? `operator public key ${i + 1}`;
      let key: KeyObject;
      try {
        key = createPublicKey(pem);
      } catch {
        throw new BusError(BusErrorCode.INVALID_KEY, `${source} is not a PEM public key`);
      }
      if (key.asymmetricKeyType !== 'ed25519')
        throw new BusError(
          BusErrorCode.INVALID_KEY,
          `${source} is a ${key.asymmetricKeyType} key, not Ed25519`,
        );
      keys.set(operatorKeyId(key), key);
    });
    if (keys.size === 0) throw new BusError(BusErrorCode.INVALID_KEY, 'no operator public key given');
    return new OperatorVerifier(keys);
  }

  /** Ids of the trusted keys. */
  get keyIds(): readonly string[] {
    return [...this.#keys.keys()];
  }

  /**
   * Whether `signed` was made by a trusted key over exactly its payload, and `event` (what the bus
   * decoded from that payload) carries the nonce every signed event must have and names `fleet`.
   */
  check(signed: SignedAdminEnvelope, event: AdminEvent, fleet: string): SignatureCheck {
    const key = this.#keys.get(signed.keyId);
    if (key === undefined) return { ok: false, reason: `signed by unknown key ${signed.keyId}` };
    let valid: boolean;
    try {
      valid = verify(null, signedBytes(signed.payload), key, Buffer.from(signed.sig, 'base64'));
    } catch {
      valid = false;
    }
    if (!valid) return { ok: false, reason: `bad signature for key ${signed.keyId}` };
    if (event.nonce === undefined) return { ok: false, reason: 'signed event has no nonce' };
    if (event.fleet !== fleet)
      return { ok: false, reason: `signed for fleet "${event.fleet ?? ''}", not "${fleet}"` };
    return { ok: true, keyId: signed.keyId };
  }
}
