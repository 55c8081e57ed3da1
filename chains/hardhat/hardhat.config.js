// The devnet's Hardhat node (`crucible devnet up --client hardhat`, `crucible demo --client hardhat`). Its
// settings come from the environment the starter sets (protocol/chain/hardhat.py): the chain id, the
// devnet's mnemonic, the block interval (0: a block per transaction), the chain type ("l1", or "op" for
// the OP Stack's L1 data fee). What Hardhat writes (artifacts/, cache/) stays in this folder, ignored by git.
const env = process.env;
const blockMs = Number(env.CRUCIBLE_BLOCK_TIME_MS ?? "1000");

export default {
  networks: {
    crucible: {
      type: "edr-simulated",
      chainId: Number(env.CRUCIBLE_CHAIN_ID ?? "31337"),
      chainType: env.CRUCIBLE_CHAIN_TYPE ?? "l1",
      accounts: { mnemonic: env.CRUCIBLE_MNEMONIC ?? "test test test test test test test test test test test junk" },
      mining: blockMs > 0 ? { auto: false, interval: blockMs } : { auto: true, interval: 0 },
    },
  },
};
