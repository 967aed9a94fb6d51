import { mergeNatsSecurity, type NatsSecurity, natsSecurityFromEnv } from '@fairway/bus';
import type { Command } from 'commander';

/** NATS credential and TLS flags, shared by every command that connects to NATS. */
export interface NatsFlags {
  natsUser?: string;
  natsPassword?: string;
  natsToken?: string;
  natsNkeySeed?: string;
  natsCreds?: string;
  natsTlsCa?: string;
  natsTlsCert?: string;
  natsTlsKey?: string;
}

/**
 * Adds the NATS credential flags to `cmd`. Each has an environment variable, which is the better
 * place for a password or token (a command line is visible to every user of the machine).
 */
export function addNatsFlags(cmd: Command): Command {
  return cmd
    .option('--nats-user <name>', 'NATS user (env NATS_USER); or write nats://user:pass@host')
    .option('--nats-password <password>', 'NATS password (env NATS_PASSWORD, preferred)')
    .option('--nats-token <token>', 'NATS token (env NATS_TOKEN, preferred)')
    .option('--nats-nkey-seed <file>', 'file holding an NKey user seed (env NATS_NKEY_SEED_FILE)')
    .option('--nats-creds <file>', 'NATS .creds file: user JWT and seed (env NATS_CREDS_FILE)')
    .option('--nats-tls-ca <file>', "CA that signed the NATS server's certificate (env NATS_TLS_CA_FILE)")
    .option('--nats-tls-cert <file>', 'client certificate for NATS TLS (env NATS_TLS_CERT_FILE)')
    .option('--nats-tls-key <file>', 'client key for NATS TLS (env NATS_TLS_KEY_FILE)');
}

/** The credentials the flags give, over those of the environment (`NATS_USER`, …). */
export function natsSecurityOf(
  flags: NatsFlags,
  env: Readonly<Record<string, string | undefined>> = process.env,
): NatsSecurity {
  return mergeNatsSecurity(natsFlagSecurity(flags), natsSecurityFromEnv(env));
}

/** The credentials the flags alone give (no environment). */
export function natsFlagSecurity(flags: NatsFlags): NatsSecurity {
  return {
    auth: {
      ...(flags.natsUser !== undefined ? { user: flags.natsUser } : {}),
      ...(flags.natsPassword !== undefined ? { password: flags.natsPassword } : {}),
      ...(flags.natsToken !== undefined ? { token: flags.natsToken } : {}),
      ...(flags.natsNkeySeed !== undefined ? { nkeySeedFile: flags.natsNkeySeed } : {}),
      ...(flags.natsCreds !== undefined ? { credsFile: flags.natsCreds } : {}),
    },
    tls: {
      ...(flags.natsTlsCa !== undefined ? { caFile: flags.natsTlsCa } : {}),
      ...(flags.natsTlsCert !== undefined ? { certFile: flags.natsTlsCert } : {}),
      ...(flags.natsTlsKey !== undefined ? { keyFile: flags.natsTlsKey } : {}),
    },
  };
}
