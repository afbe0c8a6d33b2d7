/** The domain services over one storage, built once and shared by the server and the CLI. */
import { type Clock, systemClock } from './clock.js';
import { KeyService } from './keys/key-service.js';
import { PasteService } from './pastes/paste-service.js';
import type { Storage } from './storage/database.js';
import { KeyRepository } from './storage/key-repository.js';
import { PasteRepository } from './storage/paste-repository.js';

export interface Services {
  storage: Storage;
  clock: Clock;
  pastes: PasteService;
  keys: KeyService;
}

export function createServices(storage: Storage, clock: Clock = systemClock): Services {
  return {
    storage,
    clock,
    pastes: new PasteService(new PasteRepository(storage.db), clock),
    keys: new KeyService(new KeyRepository(storage.db), clock),
  };
}
