"""The built-in offline tool world: five small stateful apps, 34 documented tools, 19 task families.

Modules: `apps/` (files, messages, calendar, shop, bank), `tools` (schemas, argument checks, dispatch),
`world` (one episode's apps and state), `templates` + `families_*` + `state_builders` (seeded task
generation), `tasks` (splits), `checker` (expected state, answers, reward), `env` (`ToolWorldEnv`).
Build it with `envs.make("toolworld", **options)`.
"""
